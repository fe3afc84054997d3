"""The pyinfra runner: everything between validated NodeSpecs and a finished pyinfra run.

Modules (import them directly; this package imports nothing so that the CLI can patch
gevent before pyinfra, paramiko or ssl are loaded):

  logroute    pyinfra/paramiko logs to the run record, never the terminal
  bootstrap   gevent monkey-patching and the open-files limit (call first)
  roles       load_role(name), role selection (ROLE_ORDER, --only/--skip, NodeSpec skips)
  inventory   pyinfra Inventory from NodeSpecs (SSH settings, host data)
  engine      Engine: connect → prepare (dry run) → execute → results, per-host failures
  progress    rich Live progress / plain lines, fed by a BaseStateCallback
  summary     per-host summary (table, JSON), exit code
  reboot      RebootGate and the rolling_reboot operation (the contract for roles)
  run         plan()/provision(): the entry points the CLI calls
"""
