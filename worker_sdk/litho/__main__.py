"""`python -m worker_sdk.litho` — the process `dome litho ...` hands off to.

stdout carries exactly one JSON document per command under --json (the
stdio-hygiene gate); everything else (progress, library chatter, warnings)
goes to stderr. File descriptor 1 is pointed at stderr while the engine runs,
so even C-level prints cannot reach stdout. SIGINT/SIGTERM cancel the job
(exit 6, {"status": "cancelled"}).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any, Callable, NoReturn

from .presets import PRESETS

EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_CANCELLED = 0, 2, 3, 6

# every mask-rule key of optimize's `mrc` request object (what a work queue passes) and its flag
MRC_FLAGS: dict[str, str] = {
    "min_feature_nm": "--min-feature",
    "min_space_nm": "--min-space",
    "min_area_nm2": "--min-area",
    "halo_nm": "--mrc-halo",
}


def _corners(text: str) -> Any:
    """`iccad13`, or `name:kernels:dose,...` (e.g. nominal:focus:1,hi:focus:1.03,lo:defocus:0.97)."""
    if text == "iccad13":
        return text
    out = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"corner {item!r} is not name:kernels:dose")
        try:
            out.append({"name": parts[0], "kernels": parts[1], "dose": float(parts[2])})
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"corner {item!r}: dose is not a number") from exc
    return out


def _doses(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"doses {text!r} are not numbers") from exc


class _Stdout:
    """Hold the real stdout aside; point fd 1 and sys.stdout at stderr until emit()."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self.fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def emit(self, text: str) -> None:
        os.write(self.fd, (text + "\n").encode())


class _Parser(argparse.ArgumentParser):
    """Bad arguments exit 2 with a typed USAGE error: under --json one JSON object on stdout, as
    every other failure of the engine."""

    json_errors = False  # set per invocation by main(); the sub-command parsers share it

    def error(self, message: str) -> NoReturn:
        from registry.errors import DomeError

        err = DomeError(message, code="USAGE", hints=[f"{self.prog} --help lists the options"]).to_object()
        if self.json_errors:
            import json

            from .violations import SCHEMA_VERSION

            print(json.dumps({"schema_version": SCHEMA_VERSION, "status": "failed", "error": err}, sort_keys=True))
        else:
            self.print_usage(sys.stderr)
            print(f"{self.prog}: USAGE: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dome litho", description="lithography engine (SOCS, ILT, metrics)")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--layout", required=True, help=".glp, .gds or .oas")
        sp.add_argument("--layer", help="layer L/D for GDS/OASIS")
        sp.add_argument("--fill", choices=["lithobench", "exact"], default="lithobench")
        sp.add_argument("--kernels", help="ICCAD 2013 data folder (default $DOME_ICCAD13_DATA, else the copy examples/iccad13/data ships)")
        sp.add_argument("--device", help="cpu or cuda[:n] (default: cuda when available)")
        sp.add_argument("--threads", type=int, help="CPU threads (default: $DOME_WORKER_CPUS, else the CPUs this process may use)")
        sp.add_argument("--corners", type=_corners, help="process window: iccad13 (default) or name:kernels:dose,... "
                        "with one corner named nominal")
        sp.add_argument("--pvb-grid", nargs="?", const=True, type=_doses, metavar="DOSES",
                        help="also report pvb_grid_nm2 over every focus condition x dose (default doses 0.98,1.00,1.02)")
        sp.add_argument("--json", action="store_true", help="one JSON object on stdout")

    e = sub.add_parser("eval", help="L2 / PVB / EPE of a mask against the layout's target")
    common(e)
    e.add_argument("--mask", help="2048x2048 grayscale PNG (threshold 127) or a layout; default: the target")
    e.add_argument("--mask-layer")
    e.add_argument("--report-level", choices=["aggregate", "detailed"], default="aggregate")
    e.add_argument("--tile", choices=["auto", "always", "never"], default="auto")
    e.add_argument("--session-id")
    e.add_argument("--pin", action="store_true", help="pin the layout and return layout_artifact_id")
    e.add_argument("--violation-count-max", type=int)

    o = sub.add_parser("optimize", help="ILT: optimise a mask for the layout")
    common(o)
    o.add_argument("--out", required=True, help="mask file: .oas or .gds (plus a .png preview) or .png")
    o.add_argument("--iterations", type=int)
    o.add_argument("--bridge-weight", dest="bridge_weight", type=float, metavar="W",
                   help="ILT: extra weight on printing in narrow gaps between target shapes (avoids bridges; default 0)")
    o.add_argument("--preset", choices=sorted(PRESETS),
                   help="a named recipe filling in what the other flags leave out (mrc-quality: mask rules "
                        "9 nm / 400 nm2, nothing cleared inside the canvas, bridge term, L2-leaning weights)")
    o.add_argument("--pvb-weight", dest="pvb_weight", type=float, metavar="W",
                   help="ILT: weight of the max/min corners' L2 terms (default 0.3)")
    o.add_argument("--band-weight", dest="band_weight", type=float, metavar="W",
                   help="ILT: weight of the smooth PV band term (default 4)")
    o.add_argument(MRC_FLAGS["min_feature_nm"], dest="min_feature_nm", type=int, metavar="NM",
                   help="mask-rule cleanup: minimum feature and gap in nm (odd; default 9 once any mask rule is given)")
    o.add_argument(MRC_FLAGS["min_space_nm"], dest="min_space_nm", type=int, metavar="NM",
                   help="mask-rule cleanup: gaps and slivers narrower than this are repaired (default min feature - 1)")
    o.add_argument(MRC_FLAGS["min_area_nm2"], dest="min_area_nm2", type=int, metavar="NM2",
                   help="mask-rule cleanup: islands and holes smaller than this are removed (default 0)")
    o.add_argument(MRC_FLAGS["halo_nm"], dest="halo_nm", type=int, metavar="NM",
                   help="mask-rule cleanup: material farther than this from the target's bounding box is cleared (default 256)")
    o.add_argument("--seed", type=int, default=0)

    s = sub.add_parser("simulate", help="printed areas per corner")
    common(s)
    s.add_argument("--mask")
    s.add_argument("--out-dir")

    c = sub.add_parser("capabilities", help="the capabilities matrix")
    c.add_argument("--json", action="store_true")
    t = sub.add_parser("selftest", help="run the FFT self-test")
    t.add_argument("--threads", type=int, help="CPU threads to test with")
    t.add_argument("--json", action="store_true")
    return p


def _request(args: argparse.Namespace) -> dict[str, Any]:
    req: dict[str, Any] = {"layout": args.layout, "fill": args.fill}
    for key in ("layer", "kernels", "device", "corners"):
        if getattr(args, key, None):
            req[key] = getattr(args, key)
    if getattr(args, "threads", None) is not None:
        req["threads"] = args.threads
    grid = getattr(args, "pvb_grid", None)
    if grid is True:
        req["pvb_grid"] = True
    elif grid:
        req["pvb_grid"] = {"doses": grid}
    if args.cmd == "eval":
        req["report_level"] = args.report_level
        if args.mask:
            req["mask"] = args.mask
        if args.mask_layer:
            req["mask_layer"] = args.mask_layer
        if args.tile != "auto":
            req["tile"] = args.tile
        if args.session_id:
            req["session_id"] = args.session_id
        if args.pin:
            req["pin"] = True
        if args.violation_count_max is not None:
            req["violation_count_max"] = args.violation_count_max
    elif args.cmd == "optimize":
        req["out"] = args.out
        req["seed"] = args.seed
        if args.iterations:
            req["iterations"] = args.iterations
        for key in ("bridge_weight", "pvb_weight", "band_weight", "preset"):
            if getattr(args, key) is not None:
                req[key] = getattr(args, key)
        mrc = {k: getattr(args, k) for k in MRC_FLAGS if getattr(args, k) is not None}
        if mrc:
            req["mrc"] = mrc
    elif args.cmd == "simulate":
        if args.mask:
            req["mask"] = args.mask
        if args.out_dir:
            req["out_dir"] = args.out_dir
    return req


def _human(resp: dict[str, Any]) -> str:
    m = resp.get("metrics")
    if not m:
        return str(resp)
    return (f"L2 {m['l2_nm2']} nm2  PVB {m['pvb_nm2']} nm2  EPE {m['epe_violations']} "
            f"(fill {m['fill']})")


def main(argv: list[str] | None = None) -> int:
    _Parser.json_errors = "--json" in (sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    out = _Stdout()
    from registry.errors import DomeError
    from worker_sdk.cancel import CancellationToken, Cancelled

    from . import api

    token = CancellationToken()

    def on_signal(signum, frame) -> None:  # noqa: ARG001
        token.cancel(f"signal {signum}")

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.perf_counter()

    def progress(done: int, total: int, loss: float) -> None:
        if done == 1 or done % 10 == 0 or done == total:
            print(f"[litho] iteration {done}/{total} loss {loss:.1f} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr, flush=True)

    try:
        if args.cmd == "capabilities":
            resp = api.describe()
        elif args.cmd == "selftest":
            from . import fftsafe
            from .threads import apply_threads

            threads = apply_threads(args.threads)
            fftsafe.self_test()
            resp = {"schema_version": api.SCHEMA_VERSION, "fft_self_test": "passed", "threads": threads,
                    "torch_normalised_fft_bug_present": fftsafe.affected_by_known_bug()}
        else:
            req = _request(args)
            fn: Callable[..., dict[str, Any]]
            if args.cmd == "eval":
                resp = api.evaluate(req, token)
            elif args.cmd == "optimize":
                resp = api.optimize(req, token, progress=progress)
            else:
                resp = api.simulate(req, token)
        print(f"[litho] {args.cmd} done in {time.perf_counter() - t0:.2f}s", file=sys.stderr, flush=True)
        out.emit(api.dumps(resp) if getattr(args, "json", False) else _human(resp))
        return EXIT_OK
    except Cancelled as exc:
        out.emit(api.dumps({"schema_version": api.SCHEMA_VERSION, "status": "cancelled", "error": exc.to_object()})
                 if getattr(args, "json", False) else "cancelled")
        return EXIT_CANCELLED
    except DomeError as exc:
        print(f"dome litho: {exc.code}: {exc.message}", file=sys.stderr)
        if getattr(args, "json", False):
            out.emit(api.dumps({"schema_version": api.SCHEMA_VERSION, "status": "failed", "error": exc.to_object()}))
        internal = exc.code in ("LITHO_FFT_SELFTEST",)
        return EXIT_INTERNAL if internal else EXIT_USAGE
    except Exception as exc:  # pragma: no cover - last resort, still JSON
        import traceback

        traceback.print_exc(file=sys.stderr)
        if getattr(args, "json", False):
            out.emit(api.dumps({"schema_version": api.SCHEMA_VERSION, "status": "failed",
                                "error": {"code": "LITHO_INTERNAL", "message": str(exc), "details": {},
                                          "hints": [], "retry": "none"}}))
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
