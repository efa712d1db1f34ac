"""Ray token authentication as a driver meets it: where this machine's token is, whether a cluster asks for
one, and joining in the cluster's own mode.

A Ray cluster asks for a token when it was started with ``RAY_AUTH_MODE=token``. A client sends its token only
when the same variable says so in its own environment: with the token in ``~/.ray/auth_token`` and the variable
unset (the ordinary case on a laptop or a login node), ``ray.init(address=...)`` sends none and retries for about
a minute against a cluster that asks for one. So the driver asks the cluster first, with one gRPC call to its GCS
(without a token, then with the one found here), and either joins in the cluster's mode or stops with one line
that says where it looked. It never turns authentication off for a cluster it joins.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.inputs.validation import InputError

PROBE_TIMEOUT_S = 3.0
HOW_TO_GET_THE_TOKEN = (
    "`ray get-auth-token` on the cluster's head prints its token: put it in ~/.ray/auth_token (chmod 600) or in a "
    "file named by RAY_AUTH_TOKEN_PATH; docs/clusters.md, 'Authentication'"
)


@dataclass(frozen=True)
class FoundToken:
    token: str
    source: str  # where it was found, for messages; never the token itself


def token_locations(environ: Mapping[str, str], home: Path) -> str:
    """Where Ray looks for a token, in its order, as one phrase for a message."""
    path = environ.get("RAY_AUTH_TOKEN_PATH")
    return f"RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH ({path or 'unset'}), {home / '.ray' / 'auth_token'}"


def find_token(environ: Mapping[str, str], home: Path) -> FoundToken | None:
    """This machine's token, looked up in Ray's own order: ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH``
    names, ``~/.ray/auth_token``. A ``RAY_AUTH_TOKEN_PATH`` that cannot be read is an error (Ray aborts on it)."""
    if token := environ.get("RAY_AUTH_TOKEN", "").strip():
        return FoundToken(token, "RAY_AUTH_TOKEN")
    if named := environ.get("RAY_AUTH_TOKEN_PATH"):
        try:
            token = Path(named).expanduser().read_text().strip()
        except OSError as error:
            raise InputError(
                f"RAY_AUTH_TOKEN_PATH {named}: cannot read it ({error.strerror}); valid: a readable file holding the "
                f"cluster's token, or unset; {HOW_TO_GET_THE_TOKEN}"
            ) from None
        if not token:
            raise InputError(f"RAY_AUTH_TOKEN_PATH {named}: the file is empty; {HOW_TO_GET_THE_TOKEN}")
        return FoundToken(token, f"RAY_AUTH_TOKEN_PATH ({named})")
    default = home / ".ray" / "auth_token"
    try:
        token = default.read_text().strip()
    except OSError:
        return None
    return FoundToken(token, str(default)) if token else None


def join_in_the_clusters_mode(gcs_address: str, given_as: str, environ: Mapping[str, str] | None = None,
                              home: Path | None = None) -> None:  # fmt: skip
    """Before ``ray.init(gcs_address)``: if the cluster asks for a token, find this machine's, check that the
    cluster takes it, and turn token mode on for this process; else raise ``InputError`` in one line naming
    ``given_as`` (the flag or variable the address came from), where the token was looked for, and how to get it.
    A cluster that asks for no token is joined as it is."""
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    if gcs_takes(gcs_address, None, given_as):
        return
    where = f"{given_as} {gcs_address}: the cluster asks for a Ray auth token"
    mode = environ.get("RAY_AUTH_MODE", "").lower()
    if mode == "disabled":
        raise InputError(f"{where} and RAY_AUTH_MODE=disabled here; valid: RAY_AUTH_MODE unset or token, with the "
                         f"token in one of {token_locations(environ, home)}")  # fmt: skip
    found = find_token(environ, home)
    if found is None:
        looked = token_locations(environ, home)
        raise InputError(f"{where} and none was found (looked in {looked}); {HOW_TO_GET_THE_TOKEN}")
    if not gcs_takes(gcs_address, found.token, given_as):
        raise InputError(f"{where} and refused the one in {found.source}; {HOW_TO_GET_THE_TOKEN}")
    if mode != "token":
        turn_token_mode_on()


def gcs_takes(gcs_address: str, token: str | None, given_as: str) -> bool:
    """Whether the GCS at ``gcs_address`` answers a call carrying ``token`` (None: no token at all)."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(gcs_address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), metadata=metadata, timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                return False
            raise InputError(
                f"{given_as} {gcs_address}: no Ray GCS answers there ({error.code().name}); valid: the address of a "
                "running cluster's head, HOST:6379 (its GCS port, not the dashboard's)"
            ) from None
    return True


def turn_token_mode_on() -> None:
    # Ray's own step for a local cluster found with a token in place (ray.init(address="auto") takes it): the variable
    # for this process and its children, then Ray's cached configuration re-read so that every call carries the token.
    from ray._private.authentication.authentication_token_setup import _enable_token_auth

    _enable_token_auth()


# -- what the doctor reports -----------------------------------------------------------------------------


def auth_mode_here() -> str:
    """This process's Ray authentication mode: on a node, a task's process has its raylet's."""
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    return "token" if is_token_auth_enabled() else "disabled"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def job_api_answers_without_token(dashboard_address: str) -> bool | None:
    """Whether the job API at ``HOST:PORT`` lists jobs for a request with no token; None where it cannot be reached."""
    try:
        with urllib.request.urlopen(f"http://{dashboard_address}/api/jobs/", timeout=PROBE_TIMEOUT_S) as response:
            return response.status == 200
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            return False
        return None
    except (urllib.error.URLError, OSError):
        return None
