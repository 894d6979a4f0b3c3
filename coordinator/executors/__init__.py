"""Executors: where worker attempts run (local bubblewrap sandboxes, OCI containers, Ray)."""
from .base import AttemptFiles, ExitInfo, Executor, Limits, SandboxUnavailable, SpawnSpecInvalid, validate_spawn_spec

__all__ = ["AttemptFiles", "ExitInfo", "Executor", "Limits", "SandboxUnavailable", "SpawnSpecInvalid",
           "validate_spawn_spec", "make_executor"]


def make_executor(kind: str, *, sandbox: str = "bwrap", max_concurrency: int = 4, limits: Limits | None = None,
                  image: str | None = None, gateway_bind: str | None = None, intents: tuple[str, ...] = ()):
    if kind == "local":
        from .local import LocalExecutor
        return LocalExecutor(sandbox=sandbox, max_concurrency=max_concurrency, limits=limits, intents=intents)
    if gateway_bind is not None and kind != "ray":
        from .ray_executor import GatewayBindInvalid
        raise GatewayBindInvalid("a gateway bind is for the Ray executor (workers on other hosts)",
                                 details={"executor": kind})
    if kind == "container":
        from .container import ContainerExecutor
        return ContainerExecutor(image=image, sandbox=sandbox, max_concurrency=max_concurrency, limits=limits)
    if kind == "ray":
        from .ray_executor import RayExecutor
        return RayExecutor(sandbox=sandbox, max_concurrency=max_concurrency, limits=limits, gateway_bind=gateway_bind,
                           image=image)
    raise ValueError(f"unknown executor {kind!r}")
