"""The entrypoint inside action Jobs: runs one playbook with ansible-runner, writes the result.

`python -m lightsout.runner` is the container command of every action Job (startup, shutdown,
provision, deprovision, healthcheck). It reads its settings from `LIGHTSOUT_*` environment
variables (`config`), assembles an ansible-runner private data dir in a scratch directory
(`project`), runs the playbook, collects the first failed task and the `set_stats` values from
the event stream (`result`), and writes ONE JSON object to the termination-message path, with
every credential value redacted (`redact`). Logs are single-line JSON on stdout (`log`).

Nothing here imports kopf or the Kubernetes client: the Job is the whole interface.
"""

from lightsout.runner.result import RESULT_LIMIT, RunResult

__all__ = ["RESULT_LIMIT", "RunResult"]
