"""MLflow's own server as a child process (``sweep ui``, ``sweep server``): its command line,
starting it, waiting until it answers, and stopping it together with its helper processes."""
from __future__ import annotations

import ctypes
import errno
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rich.console import Console

from ..core import keys, paths
from ..core.errors import ExitCode, SweepError
from ..core.urls import mask


def ui_command(tracking_uri: str, host: str, port: int) -> list[str]:
    """``mlflow ui`` on a tracking store, for one user on this machine.

    One worker: uvicorn then serves from the process it starts in, where two or more workers
    are processes of their own that each import MLflow's server (4 s of CPU each), side by
    side on a 2-core machine; one browser's requests need no more (its Flask handlers run
    in a thread pool either way)."""
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri,
            "--host", host, "--port", str(port), "--workers", "1"]


def sweep_table(base: str, name: str, store: str) -> str | tuple[str, str]:
    """The path of sweep ``name``'s runs in the MLflow UI that answers at ``base`` (its
    experiment looked up there): the runs table of its "Model training" view in the sweep's own
    view (:func:`runs_view`): best objective first, its metric and the searched settings as
    columns. A sweep run before it had its view: sorted by run name (the trials of one
    configuration next to each other). A comparison's: its confirmation runs by level, and a
    line under it with the link to its tuning runs (:func:`tuning_view`).

    The URL carries the view's key alone: MLflow ignores a saved view when the URL also sorts
    or filters. MLflow keeps which parent rows are expanded in the browser, not in the URL,
    and folds trials under their parent when the table is sorted by start time (its default);
    sorted by anything else, it lists them flat.

    Raises:
        SweepError: ``store`` holds no sweep of that name.
    """
    query = urllib.parse.urlencode({"experiment_name": name})
    try:
        with urllib.request.urlopen(f"{base}/ajax-api/2.0/mlflow/experiments/get-by-name?"
                                    f"{query}", timeout=30) as r:
            experiment = json.load(r)["experiment"]
    except urllib.error.HTTPError as e:
        if e.code != 404:  # 404: RESOURCE_DOES_NOT_EXIST
            raise
        experiment = _experiment_of_study(base, name)  # NAME-2 of `sweep run --new`
        if experiment is None:
            raise SweepError(f"no sweep named {name!r} in {store}; run it first, or pass "
                             f"--tracking-uri") from None
    tags = {t["key"] for t in experiment.get("tags", [])}
    if keys.TUNING_VIEW in tags:  # a comparison: its tuning runs a second link away
        tuning = f"{paths.runs_table(experiment['experiment_id'])}&{VIEW_PARAM}=" \
            f"{keys.TUNING_VIEW_ID}"
        return sweep_view(experiment["experiment_id"]), f"tuning runs: {base}{tuning}"
    if keys.RUNS_VIEW in tags:
        return sweep_view(experiment["experiment_id"])
    table = paths.runs_table(experiment["experiment_id"])
    order = urllib.parse.urlencode({"orderByKey": BY_RUN_NAME, "orderByAsc": "true"},
                                   quote_via=urllib.parse.quote)
    return f"{table}&{order}"


def _experiment_of_study(base: str, name: str) -> dict | None:
    """The experiment holding the parent run of study ``name`` when no experiment has that
    name: ``sweep run --new`` starts study ``NAME-2`` in experiment ``NAME``. None when no
    experiment holds one."""
    if "'" in name or "\\" in name:  # no sweep's name (spec.py): nothing to find
        return None

    def ask(endpoint: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{base}/ajax-api/2.0/mlflow/{endpoint}", data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.load(r)

    ids, token = [], None
    while True:  # every active experiment, a page at a time
        page = ask("experiments/search", {"max_results": 1000,
                                          **({"page_token": token} if token else {})})
        ids += [e["experiment_id"] for e in page.get("experiments", [])]
        token = page.get("next_page_token")
        if not token:
            break
    for start in range(0, len(ids), 100):  # a bounded list of experiments per search
        found = ask("runs/search", {
            "experiment_ids": ids[start:start + 100], "max_results": 1,
            "filter": f"tags.`{keys.ROLE}` = 'parent' and tags.`{keys.STUDY}` = '{name}'"})
        for run in found.get("runs", []):
            query = urllib.parse.urlencode({"experiment_id": run["info"]["experiment_id"]})
            return ask(f"experiments/get?{query}")["experiment"]
    return None


def sweep_view(experiment_id: str) -> str:
    """The path of the runs table in the sweep's own view (:func:`runs_view`)."""
    return f"{paths.runs_table(experiment_id)}&{VIEW_PARAM}={keys.RUNS_VIEW_ID}"


BY_RUN_NAME = "tags.`mlflow.runName`"  # the runs table's "Run Name" sort, in MLflow's syntax
# MLflow 3's saved views of the runs table: an experiment tag (keys.RUNS_VIEW) named by the view's
# key, opened by the URL parameter VIEW_PARAM=key; the tag is ignored if the URL also sorts
VIEW_PARAM = "viewStateShareKey"
# the runs table's columns MLflow keeps visible (their ids): the run's name, then the sweep's
# own, then when it started and how long it took; its logged model (the best trial's ONNX file)
NAME_COLUMN, LAST_COLUMNS = "attributes.`Run Name`", ["runDateAndNestInfo", "duration"]
MODELS_COLUMN = "attributes.`Models`"
# each trial's end (complete, pruned, failed, interrupted): a pruned run ends FINISHED as a
# complete one does, so the status icon alone no longer tells them apart
STATE_COLUMN = f"tags.`{keys.STATE}`"


def runs_view(spec, study: str | None = None) -> str:
    """The value of the experiment tag :data:`keys.RUNS_VIEW`: a saved view of MLflow's runs
    table sorted by the (first) objective's metric, best first, with each objective's metric
    and every searched setting as columns, then each trial's end (:data:`keys.STATE`: pruned
    or complete, which the run's status no longer tells); ``sweep ui`` links to it. MLflow
    sorts by a metric's last value, whatever the objective's ``reduce``.

    A comparison's (``compare:``) shows its confirmation runs alone (of study ``study``, when
    given: ``sweep run --new`` adds a study to the experiment), grouped by level: a row per
    level with its mean objective over its seeds as the report's table of levels rounds it
    (:data:`keys.LEVEL_MEAN`, which each confirmation run carries once the comparison is
    decided), the best mean first, phase, level and seed as columns; its tuning runs are
    :func:`tuning_view`'s.
    A lucky seed no longer tops the table, and a tuning run's value (the winner of a search,
    biased up) is no level's figure.

    MLflow's group row shows one aggregate of each metric over the group's runs (min, average
    or max, one for every column): its average prints all its digits, even of equal rounded
    values (0.97 three times: 0.9700000000000001), where the largest of equal values is that
    value itself. So the view aggregates by *max* and leaves out the objective's own column,
    whose *max* would be the best seed's."""
    first = spec.objectives[0]
    if spec.compare is None:
        return _view(f"sweep: best {first.metric} first", spec, [], {})
    from ..answer.compare import CONFIRM, Comparison

    levels = [level.label for level in Comparison.of(spec).levels]
    # sorted by the level's mean (_view sorts by the first metric), MLflow orders the groups
    # by it, best level first (MLflow 3.18). Not by start time: MLflow then also fetches the
    # parent of the runs listed, a run without a level that it shows as a group "Additional
    # runs"; nor by a metric the parent run has.
    return _view(f"sweep: confirmation runs, mean {first.metric} by level", spec,
                 COMPARISON_COLUMNS,
                 {"searchFilter": phase_filter(CONFIRM, study),
                  "groupBy": {"aggregateFunction": "max",
                              "groupByKeys": [{"mode": "tag", "groupByData": keys.LEVEL}]},
                  # a row a level, its seeds folded under it (MLflow's group id: mode.key.value)
                  "groupsExpanded": {f"tag.{keys.LEVEL}.{label}": False for label in levels},
                  # the levels' names readable
                  "columnWidths": {NAME_COLUMN: _name_width(levels)}},
                 metrics=[keys.LEVEL_MEAN])


def _name_width(levels: list[str]) -> int:
    """Pixels of the Run Name column for a group row's "Group: <level>" (~6.5 px a letter,
    after the arrow and swatch, before the count): never below MLflow's 190, at most 480."""
    return max(190, min(480, 60 + 7 * len(f"Group: {max(levels, key=len)}")))


def tuning_view(spec, study: str | None = None) -> str:
    """The value of the experiment tag :data:`keys.TUNING_VIEW`: a comparison's tuning runs
    (of study ``study``, when given), best objective first, with the columns of
    :func:`runs_view`; ``sweep ui`` prints its link under the first."""
    from ..answer.compare import TUNE

    return _view(f"sweep: tuning runs, best {spec.objectives[0].metric} first", spec,
                 COMPARISON_COLUMNS, {"searchFilter": phase_filter(TUNE, study)})


def phase_filter(phase: str, study: str | None = None) -> str:
    """MLflow's search filter of a comparison's runs of one phase (:data:`keys.PHASE`), of one
    study when given (a sweep's name holds no quote: spec.py)."""
    text = f"tags.`{keys.PHASE}` = '{phase}'"
    return text if study is None else f"{text} and tags.`{keys.STUDY}` = '{study}'"


# a comparison's runs table: which phase a run is of, which level, which seed (MLflow's ids)
COMPARISON_COLUMNS = [f"tags.`{k}`" for k in (keys.PHASE, keys.LEVEL, keys.SEED)]


def _view(name: str, spec, extra: list[str], more: dict,
          metrics: list[str] | None = None) -> str:
    """A saved view of the runs table named ``name``: sorted by the first of ``metrics``
    (default: each objective's metric), best first in the (first) objective's direction, with
    ``metrics``, the columns ``extra``, every searched setting and each trial's end as columns
    next to the run's name; ``more`` (a filter, a grouping, a sort) added. The value of an
    experiment tag ``mlflow.sharedViewState.<key>``."""
    from ..config import space as sp

    metrics = metrics or list(dict.fromkeys(o.metric for o in spec.objectives))
    settings = list(dict.fromkeys(node.setting for _, node in sp.walk(spec.space)
                                  if not isinstance(node, sp.Fixed)))
    columns = [f"metrics.`{m}`" for m in metrics] + extra \
        + [f"params.`{s}`" for s in settings] + [STATE_COLUMN]
    state = {"orderByKey": f"metrics.`{metrics[0]}`",
             "orderByAsc": spec.objectives[0].direction == "minimize",
             "selectedColumns": columns + [MODELS_COLUMN],
             # next to the run's name, not past the screen's right edge
             "columnOrder": [NAME_COLUMN, *columns, *LAST_COLUMNS, MODELS_COLUMN], **more}
    stamp = int(time.time() * 1000)
    return json.dumps({"name": name, "createdAt": stamp, "updatedAt": stamp,
                       "state": json.dumps(state)})


def artifacts_destination(text: str) -> str:
    """Where ``sweep server`` keeps the artifacts it receives: an object store's URI (``s3://``,
    ``gs://``, ``wasbs://``...) as given, else a folder, made here and given absolute."""
    if "://" in text:
        return text
    folder = Path(text).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


def server_command(backend: str, artifacts: Path | str, host: str, port: int, workers: int,
                   allowed_hosts: str | None) -> list[str]:
    """``mlflow server`` with artifact proxying, for several machines sharing one store."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
           "--artifacts-destination", str(artifacts), "--serve-artifacts",
           "--host", host, "--port", str(port), "--workers", str(workers)]
    if allowed_hosts:
        cmd += ["--allowed-hosts", allowed_hosts]
    return cmd


def storage_proxy(args, console: Console) -> Sidecar | None:
    """The storage proxy ``sweep server`` starts with ``--storage-proxy``: Optuna's gRPC proxy
    in front of the RDB study storage ``--storage``, on ``--host`` and ``--proxy-port``.

    Raises:
        SweepError: a proxy flag without ``--storage-proxy``, no ``--storage``, a storage the
            proxy cannot serve (a journal file, a proxy), or its port taken.
    """
    if not args.storage_proxy:
        if args.storage:
            raise SweepError(f"--storage {mask(args.storage)}: sweep server serves a study "
                             f"storage only through its proxy; add --storage-proxy")
        return None
    from ..core.urls import RDB_SCHEMES  # what the proxy's own storage opener takes

    url = args.storage or ""
    scheme = urllib.parse.urlsplit(url).scheme.split("+")[0]
    if scheme not in RDB_SCHEMES:
        raise SweepError(f"--storage-proxy --storage {mask(url) or '(none)'}: the proxy serves "
                         f"a database study storage: pass --storage postgresql://USER@HOST/DB "
                         f"(a journal file or another proxy cannot be served)")
    if args.proxy_port == args.port:
        raise SweepError(f"--proxy-port {args.proxy_port}: the MLflow server listens on that "
                         f"port (--port); pick another")
    check_address(console, args.host, args.proxy_port, flag="--proxy-port")
    return Sidecar(proxy_command(args.host, args.proxy_port),
                   Path.cwd() / ".sweep" / "storage-proxy.log", "Optuna storage proxy",
                   args.host, args.proxy_port, f"grpc://{args.host}:{args.proxy_port}",
                   hint=f"   (sweep run ... --storage this URL on every machine; it serves "
                        f"{mask(url)})", env={PROXY_STORAGE: url})


PROXY_STORAGE = "SWEEP_PROXY_STORAGE"  # the proxy's storage URL: not on its command line,
# where `ps` shows a database password to everyone on the machine


def proxy_command(host: str, port: int) -> list[str]:
    """The command line of the storage proxy's process (:func:`run_proxy`); its storage URL
    goes in its environment (:data:`PROXY_STORAGE`)."""
    return [sys.executable, "-m", "orchestrator.running.server", "proxy", host, str(port)]


def run_proxy(url: str, host: str, port: int) -> ExitCode:
    """Serve the study storage ``url`` through Optuna's gRPC proxy on ``host:port`` until the
    process is stopped; the storage opened as ``sweep run`` opens it (a new database's tables
    created under the store's lock). Returns 2 when it cannot be opened (said on stderr)."""
    import optuna

    from ..stores.storages import open_storage  # Optuna: imported in the proxy's process only

    try:
        storage = open_storage(url)
    except SweepError as e:
        sys.stderr.write(f"sweep: {e}\n")
        return ExitCode.BAD_INPUT
    # Optuna's advice: a cached storage (get_storage), not a bare RDBStorage, behind the proxy
    optuna.storages.run_grpc_proxy_server(optuna.storages.get_storage(storage), host=host,
                                          port=port)
    return ExitCode.OK


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # besides SIGINT (Ctrl-C)
PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when its parent dies


@dataclass(frozen=True)
class Sidecar:
    """A process started beside the server, listening on ``host:port``, and stopped with it
    (the Optuna storage proxy of ``sweep server --storage-proxy``)."""

    cmd: list[str]
    log_path: Path
    what: str  # its name in messages
    host: str
    port: int
    url: str  # printed once it listens
    hint: str = ""
    env: dict[str, str] = field(default_factory=dict)  # added to its environment


def serve(console: Console, cmd: list[str], log_path: Path, what: str, base: str,
          path: str | Callable[[str], str | tuple[str, ...]], hint: str = "",
          sidecar: Sidecar | None = None) -> ExitCode:
    """Start an MLflow server, print its URL once it answers, and stop it with its helper
    processes on Ctrl-C, SIGTERM or SIGHUP (or when it exits).

    Args:
        cmd: the server's command line (:func:`ui_command`, :func:`server_command`), its
            address checked by :func:`check_address` first.
        log_path: where its output goes (appended).
        what: its name in messages, e.g. ``MLflow UI``.
        base: its URL, e.g. ``http://127.0.0.1:5000``; ``path`` is appended to the URL printed,
            or asked of the server once it answers (a function of ``base``, which may raise
            :class:`SweepError`: the server is stopped, the error passed on); that function
            may also give lines said under the URL (a second link).
        hint: said after the URL.
        sidecar: a process started with the server, its URL printed once it listens, stopped
            with the server; the server stops when it ends.

    Returns:
        :attr:`ExitCode.OK` once the server stopped.

    Raises:
        SweepError: it did not answer within two minutes (the end of its log says why), or
            the sidecar did not listen or ended.
    """
    # MLflow's job consumers serve GenAI features, not training runs: six helper processes of
    # ~240 MB each that a sweep's server does not need (set the variable to keep them).
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    # a stop signal raises KeyboardInterrupt, so that the finally below stops the server: it has
    # its own session, and nothing else would (installed before it starts: no window)
    previous = {s: signal.signal(s, _interrupt) for s in STOP_SIGNALS}
    procs: list[subprocess.Popen] = []
    try:
        if sidecar is not None:  # first: it starts faster than MLflow, and is asked second
            procs.append(_start(sidecar.cmd, sidecar.log_path, {**env, **sidecar.env}))
        proc = _start(cmd, log_path, env)
        procs.append(proc)
        _wait_until_it_answers(proc, what, base, log_path)
        if sidecar is not None:
            _wait_until_it_listens(procs[0], sidecar)
        _say_where(console, what, base, path(base) if callable(path) else path, hint, log_path,
                   sidecar)
        _wait_for_the_end(proc, procs[0] if sidecar is not None else None, sidecar)
    except KeyboardInterrupt:
        pass
    finally:
        for p in reversed(procs):
            kill_group(p)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return ExitCode.OK


def _say_where(console: Console, what: str, base: str, found: str | tuple[str, ...], hint: str,
               log_path: Path, sidecar: Sidecar | None) -> None:
    """Print the URL of a server that answers (``base`` and the path ``found``, whose further
    lines are said under it), and its sidecar's."""
    path, *under = (found,) if isinstance(found, str) else found
    console.print(f"{what}: {base}{path}{hint}   (Ctrl-C stops it; server log: {log_path})",
                  soft_wrap=True)
    for line in under:
        console.print(f"  {line}", soft_wrap=True)
    if sidecar is not None:
        console.print(f"{sidecar.what}: {sidecar.url}{sidecar.hint}   (log: "
                      f"{sidecar.log_path})", soft_wrap=True)
    console.file.flush()


def _start(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # its own process group: the MLflow server's helpers outlive a server killed alone
        return subprocess.Popen(cmd, start_new_session=True, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_stop_with_parent)


def _wait_for_the_end(proc: subprocess.Popen, side: subprocess.Popen | None,
                      sidecar: Sidecar | None) -> None:
    """Until the server exits; or, with a sidecar, until either does (the other is stopped)."""
    if side is None or sidecar is None:
        proc.wait()
        return
    while proc.poll() is None and side.poll() is None:
        time.sleep(0.5)
    if side.poll() is not None:
        raise SweepError(f"the {sidecar.what} stopped (exit code {side.returncode}); "
                         f"{_log_end(sidecar.log_path)}")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _stop_with_parent() -> None:
    """In the server's process, before MLflow starts: SIGTERM when the CLI dies, even by a
    SIGKILL no handler sees (Linux). MLflow passes SIGTERM on to its uvicorn server, which
    stops its workers."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the handlers above are all there is
        pass


def _wait_until_it_answers(proc: subprocess.Popen, what: str, base: str, log_path: Path) -> None:
    if wait_http(f"{base}/health", proc, timeout=120) and proc.poll() is None:
        return
    raise SweepError(f"the {what} did not start on {base} (port taken? try --port); "
                     f"{_log_end(log_path)}")


def _wait_until_it_listens(proc: subprocess.Popen, sidecar: Sidecar) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection((sidecar.host, sidecar.port), timeout=2):
                return
        except OSError:  # not listening yet: refused at once
            time.sleep(0.05)
    raise SweepError(f"the {sidecar.what} did not start on {sidecar.url}; "
                     f"{_log_end(sidecar.log_path)}")


def _log_end(log_path: Path) -> str:
    from .pool import tail_lines

    return f"its log {log_path} ends: {' | '.join(tail_lines(log_path, 3).splitlines())}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def check_address(console: Console, host: str, port: int, flag: str = "--port") -> None:
    """Before anything starts: refuse a port something else listens on (the server would fail
    to bind, and whatever answers there, another folder's store, would look like it), and warn
    that an address other than loopback serves the store to anyone, without authentication.

    Raises:
        SweepError: the port is taken, or the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as the server binds: a port left in TIME_WAIT by a server that stopped is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise SweepError(f"{flag} {port}: port {port} on {host} is already in use by "
                                 f"another program (another sweep ui or MLflow server?); stop "
                                 f"it, or pick a free port with {flag}") from None
            raise SweepError(f"--host {host} {flag} {port}: cannot listen there: "
                             f"{e.strerror or e}") from None
    if not is_loopback(host):
        console.print(f"warning: --host {host}: the store is then served without "
                      f"authentication: anyone who reaches this machine on port {port} can read, "
                      f"change and delete its runs; keep it behind a firewall or VPN",
                      soft_wrap=True)


def wait_http(url: str, proc: subprocess.Popen, timeout: float) -> bool:
    """Whether ``url`` answered 200 within ``timeout`` seconds while ``proc`` ran."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:  # not listening yet: refused at once, so a short pause costs nothing
            time.sleep(0.05)
    return False


def kill_group(proc: subprocess.Popen) -> None:
    """Stop ``proc``'s process group: SIGTERM, then SIGKILL after 10 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__" and sys.argv[1:2] == ["proxy"]:  # the child of proxy_command
    sys.exit(run_proxy(os.environ[PROXY_STORAGE], sys.argv[2], int(sys.argv[3])))
