"""``dxplain serve``: a local, read-only web app and JSON API over an output folder's runs (``dxplain.web.app``)."""

from __future__ import annotations

import ipaddress
import sys

from ..params import Interval, validate

CONSTRAINTS = {"port": Interval(int, 1, 65535, example=8765)}


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(a) -> int:
    validate(CONSTRAINTS, {"port": a.port})
    import uvicorn

    from ..errors import InputError
    from ..io.atomic import exists, join
    from ..web.app import create_app

    if not exists(join(a.out, "runs")):
        raise InputError(f"{a.out}: no runs folder; serve the --out folder of a refresh (default dxplain-out)")
    if not loopback(a.host):
        print(
            f"dxplain: warning: serving on {a.host}: anyone who reaches this host and port reads the runs"
            + ("" if a.token else "; pass --token to require one"),
            file=sys.stderr,
        )
    print(f"dxplain serve: {a.out} on http://{a.host}:{a.port}/ (Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(create_app(str(a.out), a.token), host=a.host, port=a.port, log_level="warning")
    return 0


def register(sub) -> None:
    s = sub.add_parser("serve", help="browse runs and look up any user's explanations in a browser (and a JSON API)")
    s.add_argument(
        "out", nargs="?", default="dxplain-out", help="an output folder of refresh runs (default dxplain-out)"
    )
    s.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1, this machine only; another one is warned about)",
    )
    s.add_argument("--token", help="require this token on every API request (Authorization: Bearer TOKEN)")
    s.set_defaults(func=cmd_serve)
