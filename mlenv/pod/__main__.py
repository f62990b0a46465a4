"""``python -m mlenv.pod init|launch|run-torchrun|run-follow|run-state|run-stop|preflight``
(runs inside the pods).

Exit codes follow docs/contracts.md: 0 ok, 1 acceptance FAIL, 2 bad input, 3 ERROR.
This is the pod side's boundary, so errors become one message here, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from mlenv import contract
from mlenv.errors import EXIT_ERROR, InputError, MlenvError


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m mlenv.pod", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)

    i = sub.add_parser("init", help="every pod: hostfile, .deepspeed_env, RDMA checks, sshd")
    i.add_argument(
        "--foreground", action="store_true", help="exec sshd in the foreground (container entry)"
    )
    i.add_argument("--no-sshd", action="store_true", help="write files only (ssh-less clusters)")
    i.add_argument("--sysfs-root", default="/sys", help=argparse.SUPPRESS)
    i.add_argument(
        "--allow-low-memlock",
        action="store_true",
        help="warn instead of failing on a low ulimit -l",
    )

    def job_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--profile", choices=("quick", "full"), default=None, help="acceptance profile"
        )
        p.add_argument("--report-dir", default=None, help="default /workspace/results/<run-id>")
        p.add_argument("--run-id", default=None, help="default: UTC timestamp")
        p.add_argument("--module", "-m", default=None, help="run a module instead of a script")
        p.add_argument(
            "--topology",
            default=None,
            metavar="JSON",
            help="racks for fabric.localize as MLENV_TOPOLOGY (mlenv launch passes the Node label's)",
        )
        p.add_argument(
            "script",
            nargs=argparse.REMAINDER,
            help="SCRIPT [ARGS…]; none: the acceptance suite "
            "(then '-- --checks … --options FILE' are passed to it)",
        )

    la = sub.add_parser("launch", help="pod 0: preflight, then DeepSpeed across every pod")
    la.add_argument(
        "--torchrun", action="store_true", help="print the ssh-less per-pod commands instead"
    )
    la.add_argument("--deadline", type=float, default=120.0, help="preflight deadline in seconds")
    la.add_argument("--no-preflight", action="store_true", help=argparse.SUPPRESS)
    la.add_argument(
        "--upstream-form",
        action="store_true",
        help="recognise upstream ml-dev-env's 'SCRIPT [DS_CONFIG] [HOSTFILE] [ARGS…]' "
        "(workspace/launch_deepspeed.sh sets it; rule in docs/pod-launch.md)",
    )
    job_args(la)

    tr = sub.add_parser(
        "run-torchrun", help="every pod: torchrun with the shared static rendezvous"
    )
    tr.add_argument(
        "--detach",
        action="store_true",
        help="start it under a supervisor and return once it runs (output and status in "
        "the state dir's runs/RUN_ID; see run-follow, run-state, run-stop); needs --run-id",
    )
    tr.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    job_args(tr)

    for verb, what in (
        ("run-follow", "print a detached run's output from a byte offset, framed, to its end"),
        ("run-state", "one line: how a detached run stands (running, exited STATUS, ...)"),
        ("run-stop", "stop a detached run (SIGINT to its process group)"),
    ):
        rp = sub.add_parser(verb, help=what)
        rp.add_argument("--run-id", required=True)
        if verb == "run-follow":
            rp.add_argument("--offset", type=int, default=0, help="byte offset to start from")

    pf = sub.add_parser("preflight", help="check that every peer resolves and its sshd answers")
    pf.add_argument("--deadline", type=float, default=60.0)
    return ap


def _topology(text: str) -> str:
    """``--topology``'s value when the ranks can read it (InputError, exit 2, otherwise);
    it replaces the pod's own MLENV_TOPOLOGY for this run's ranks."""
    try:
        contract.topology_compact(text)  # the form .deepspeed_env needs: also proves it reads
    except ValueError as e:
        raise InputError(f"--topology: {e}") from None
    return text


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one verb; returns the exit code."""
    args = _parser().parse_args(argv)
    env = dict(os.environ)
    if args.verb == "run-torchrun" and args.supervised:
        # the detached rank: its pid, then its status, in its run's folder
        from mlenv.pod import detach, runtime

        try:
            where = runtime.detached_dir(env, args.run_id)
        except MlenvError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
        with detach.supervised(where) as set_status:
            rc = _run(args, env)
            set_status(rc)
        return rc
    return _run(args, env)


def _torchrun_words(args: argparse.Namespace) -> list[str]:
    """The supervised run-torchrun's own options and script, from the parsed ones."""
    words = ["--run-id", args.run_id]
    for flag, value in (
        ("--report-dir", args.report_dir),
        ("--profile", args.profile),
        ("--module", args.module),
        ("--topology", args.topology),
    ):
        if value is not None:
            words += [flag, value]
    script = list(args.script)
    return [*words, "--", *(script[1:] if script[:1] == ["--"] else script)]


def _run(args: argparse.Namespace, env: dict[str, str]) -> int:
    # Imported here so '--help' stays cheap and argparse errors come first.
    from mlenv.pod import runtime

    try:
        if args.verb == "run-follow":
            return runtime.verb_run_follow(env, args.run_id, args.offset)
        if args.verb == "run-state":
            return runtime.verb_run_state(env, args.run_id)
        if args.verb == "run-stop":
            return runtime.verb_run_stop(env, args.run_id)
        if args.verb == "init":
            return runtime.verb_init(
                env,
                start_sshd=not args.no_sshd,
                foreground=args.foreground,
                sysfs_root=args.sysfs_root,
                strict_memlock=not args.allow_low_memlock,
            )
        script = list(args.script)
        if args.topology is not None:
            env[contract.TOPOLOGY_ENV] = _topology(args.topology)
        if script and script[0] == "--":
            script = script[1:]
        if args.verb == "launch":
            hostfile_path = None
            if args.upstream_form and not args.module:
                from mlenv.pod import positional

                form = positional.parse(script)
                script, hostfile_path = form.words, form.hostfile
                if form.ds_config or form.hostfile:
                    runtime.say(
                        f"upstream form: DS config {form.ds_config or '-'}, hostfile "
                        f"{form.hostfile or '-'}; script arguments {script[1:]}"
                    )
            return runtime.verb_launch(
                env,
                script=script,
                module=args.module,
                torchrun=args.torchrun,
                deadline_s=args.deadline,
                profile=args.profile,
                report_dir=args.report_dir,
                run_id=args.run_id,
                skip_preflight=args.no_preflight,
                hostfile_path=hostfile_path,
            )
        if args.verb == "run-torchrun" and args.detach:
            if not args.run_id:
                raise InputError("run-torchrun --detach: pass the run's --run-id")
            return runtime.verb_start_detached(env, args.run_id, _torchrun_words(args))
        if args.verb == "run-torchrun":
            return runtime.verb_run_torchrun(
                env,
                script=script,
                module=args.module,
                profile=args.profile,
                report_dir=args.report_dir,
                run_id=args.run_id,
            )
        return runtime.verb_preflight(env, args.deadline)
    except MlenvError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    # argparse itself exits 2 on bad flags, which is EXIT_INPUT already.
    sys.exit(main())
