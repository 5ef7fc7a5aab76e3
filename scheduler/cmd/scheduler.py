"""``berth-scheduler``: the scheduler daemon.

Under the eventlet backend the standard library must be monkey-patched before
anything else is imported (oslo.messaging's eventlet executor otherwise takes
messages and never replies). The backend is a config option, so this module
reads it first with a tiny parse of the command line and the config files,
using the standard library only; ``scheduler.service`` then parses everything
properly with oslo.config and checks that both agree.
"""
import configparser
import glob
import os
import sys

_PROJECT = "berth"
_PROG = "berth-scheduler"


def _config_sources(argv: list[str]) -> list[str]:
    """The config files oslo.config would read, in order (later ones win)."""
    files: list[str] = []
    dirs: list[str] = []
    it = iter(argv)
    for arg in it:
        for flag, dest in (("--config-file", files), ("--config-dir", dirs)):
            if arg == flag:
                dest.append(next(it, ""))
            elif arg.startswith(flag + "="):
                dest.append(arg.split("=", 1)[1])
    if not files and not dirs:
        # oslo.config's defaults: ~/.berth/, ~/, /etc/berth/, /etc/
        home = os.path.expanduser("~")
        for d in (os.path.join(home, "." + _PROJECT), home,
                  os.path.join("/etc", _PROJECT), "/etc"):
            for name in (_PROJECT + ".conf", _PROG + ".conf"):
                if os.path.exists(os.path.join(d, name)):
                    files.append(os.path.join(d, name))
                    break
            if os.path.isdir(os.path.join(d, _PROJECT + ".conf.d")):
                dirs.append(os.path.join(d, _PROJECT + ".conf.d"))
    for d in dirs:
        files.extend(sorted(glob.glob(os.path.join(d, "*.conf"))))
    return files


def early_backend(argv: list[str]) -> str:
    """``[DEFAULT] concurrency_backend`` as the config files set it (default eventlet)."""
    backend = "eventlet"
    for path in _config_sources(argv):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        try:
            parser.read(path)
        except configparser.Error:
            continue  # oslo.config reports the file properly later
        value = parser.defaults().get("concurrency_backend")
        if value:
            backend = value.strip()
    return backend


def main() -> int:
    backend = early_backend(sys.argv[1:])
    import warnings

    # Not actionable for an operator who chose the backend; said once in the log.
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
    if backend == "eventlet":
        import eventlet

        eventlet.monkey_patch()
    from scheduler import service

    try:
        return service.main(sys.argv[1:], backend)
    except Exception as e:
        line = startup_failure(e)
        if line is None:
            raise
    # One line on stderr (and in the log file, when there is one): what cannot be
    # used and why; no traceback, and no URL (it may hold a password).
    print(f"{_PROG}: {line}", file=sys.stderr, flush=True)
    _log_error(line)
    return EXIT_UNAVAILABLE


#: Exit status when the database or the broker cannot be used at start-up.
EXIT_UNAVAILABLE = 3


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def startup_failure(error: BaseException) -> str | None:
    """The one line to print when ``error`` means the database or the message
    broker cannot be used (down, refused, wrong password), else None."""
    import sqlalchemy.exc
    from oslo_db import exception as db_exc

    if isinstance(error, db_exc.DBError | sqlalchemy.exc.SQLAlchemyError):
        return f"cannot use the database ([database] connection): {_first_line(error)}"
    import amqp.exceptions
    import kombu.exceptions
    import oslo_messaging

    if isinstance(error, oslo_messaging.MessagingException | amqp.exceptions.AMQPError
                  | kombu.exceptions.KombuError | ConnectionError):
        return (f"cannot use the message broker ([DEFAULT] transport_url): "
                f"{_first_line(error)}")
    return None


def _log_error(line: str) -> None:
    """The line in the log too, unless the log is the terminal stderr went to."""
    from oslo_config import cfg
    from oslo_log import log as logging

    conf = cfg.CONF
    if getattr(conf, "log_file", None) or getattr(conf, "use_syslog", False) \
            or getattr(conf, "use_journal", False):
        logging.getLogger("berth").error("berth-scheduler cannot start: %s", line)


if __name__ == "__main__":
    sys.exit(main())
