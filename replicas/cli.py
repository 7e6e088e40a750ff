"""The ``replica`` command: ``serve`` one ONNX model over V2 REST (and gRPC), or ``build-models``.

Heavy imports (uvicorn, onnxruntime, scikit-learn) happen inside each subcommand so that
``replica --help`` is instant and ``serve`` never loads scikit-learn. ``serve`` needs the
``replica`` extra (onnxruntime; ``gpu`` for CUDA) and ``build-models`` the ``build`` extra
(scikit-learn, skl2onnx, onnx, tqdm); without its extra, each says which to install.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

BUILD_PACKAGES = ("sklearn", "skl2onnx", "onnx", "tqdm")  # the `build` extra, by import name


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replica", description="Serve or build V2 (Open Inference Protocol) models."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve one ONNX model over the V2 REST protocol")
    serve.add_argument("--model", required=True, type=Path, help="path of the .onnx file")
    serve.add_argument("--name", required=True, help="model name in the V2 URLs")
    serve.add_argument("--version", default="1", help="model version (default: 1)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", required=True, type=int, help="TCP port (0: any free port)")
    serve.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    serve.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="also serve the V2 gRPC protocol on this TCP port (0: any free port); the TLS "
        "options below apply to it too",
    )
    serve.add_argument("--ssl-certfile", type=Path, help="serve HTTPS with this certificate (PEM)")
    serve.add_argument("--ssl-keyfile", type=Path, help="the certificate's private key (PEM)")
    serve.add_argument(
        "--ssl-ca-certs", type=Path, help="require client certificates signed by these CAs (mTLS)"
    )
    serve.add_argument(
        "--threads", type=int, default=1, help="inference worker threads (default: 1)"
    )
    serve.add_argument(
        "--enable-faults",
        action="store_true",
        help="expose /admin/faults (chaos tests only), guarded by a key: requests need "
        "'Authorization: Bearer <key>'; without a key the replica refuses to start",
    )
    serve.add_argument(
        "--fault-key-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="file holding the fault key (surrounding whitespace ignored); wins over the "
        "REPLICA_FAULT_KEY environment variable, which is used when this is not given",
    )
    serve.add_argument(
        "--accelerator",
        choices=["auto", "off"],
        default="auto",
        help="auto: report the GPU's health on /metrics (NVML, the 'gpu' extra's "
        "nvidia-ml-py) when there is one, else that there is none; off: never sample",
    )
    serve.add_argument("--gpu-index", type=int, default=0, help="the GPU to sample (default: 0)")
    serve.add_argument(
        "--accelerator-interval",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="seconds between NVML samples, 0.1 to 10 (default: 0.5, i.e. 2 Hz)",
    )
    serve.add_argument("--fault-seed", type=int, default=None, help="seed for fault randomness")
    serve.add_argument(
        "--graceful-timeout",
        type=int,
        default=30,
        help="seconds in-flight requests get to finish after SIGTERM (default: 30)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="(default: info)",
    )
    serve.add_argument(
        "--log-format",
        default="json",
        choices=["json", "text"],
        help="json: one object per line, as the gateway writes (default: json)",
    )
    serve.set_defaults(run=_serve)

    build = sub.add_parser("build-models", help="train, export and verify the digits models")
    build.add_argument("--out", type=Path, default=Path("models"))
    build.add_argument("--fallback-dir", type=Path, default=Path("fallback_models"))
    build.add_argument(
        "--refresh-fallback",
        action="store_true",
        help="rebuild the committed fallback model and golden set (changes their SHA-256)",
    )
    build.set_defaults(run=_build)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from gateway.telemetry.logging import configure_logging
    from replicas.fault_auth import FaultKey, FaultKeyError, load_fault_key

    try:
        from replicas.serve import ServeOptions, serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "onnxruntime":
            raise
        print(
            "replica serve: onnxruntime is not installed; the replica server needs the "
            "'replica' extra: pip install 'v2-gateway[replica]' ('gpu' for --device cuda)",
            file=sys.stderr,
        )
        return 2

    fault_key: FaultKey | None = None
    if args.enable_faults:
        try:
            fault_key = load_fault_key(args.fault_key_file, os.environ)
        except FaultKeyError as exc:
            print(f"replica: {exc}", file=sys.stderr)
            return 2
    elif args.fault_key_file is not None:
        print("replica: --fault-key-file needs --enable-faults", file=sys.stderr)
        return 2
    if not args.model.is_file():
        print(f"replica: model file not found: {args.model}", file=sys.stderr)
        return 2
    if not 0.1 <= args.accelerator_interval <= 10.0:
        print("replica: --accelerator-interval must be between 0.1 and 10", file=sys.stderr)
        return 2
    if args.threads < 1:
        print("replica: --threads must be >= 1", file=sys.stderr)
        return 2
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None) or (
        args.ssl_ca_certs is not None and args.ssl_certfile is None
    ):
        print("replica: HTTPS needs --ssl-certfile and --ssl-keyfile together", file=sys.stderr)
        return 2
    configure_logging(json=args.log_format == "json", level=args.log_level.upper())
    options = ServeOptions(
        model=args.model,
        name=args.name,
        version=args.version,
        host=args.host,
        port=args.port,
        device=args.device,
        threads=args.threads,
        fault_key=fault_key,
        fault_seed=args.fault_seed,
        graceful_timeout_s=args.graceful_timeout,
        log_level=args.log_level,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ssl_ca_certs=args.ssl_ca_certs,
        grpc_port=args.grpc_port,
        gpu_index=None if args.accelerator == "off" else args.gpu_index,
        accelerator_interval_s=args.accelerator_interval,
    )
    serve(options)
    return 0


def _build(args: argparse.Namespace) -> int:
    try:
        from replicas.build import BuildError, build_models
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in BUILD_PACKAGES:
            raise
        print(
            f"replica build-models: {missing} is not installed; the model build needs the "
            "'build' extra: pip install 'v2-gateway[build]' (or '.[build]' in a checkout)",
            file=sys.stderr,
        )
        return 2
    from v2proto.errors import ManifestError

    try:
        build_models(args.out, args.fallback_dir, refresh_fallback=args.refresh_fallback)
    except (BuildError, ManifestError) as exc:
        print(f"replica build-models: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
