"""The acceptance report: gathered from run records (gather.py), rendered as HTML,
Markdown or JSON (render.py), with an inline SVG NCCL chart (chart.py)."""
