"""Service settings, read from ``GRADGUARD_*`` environment variables (pydantic-settings).

Every field is documented in ``docs/service.md``. Two modes:

``embedded`` (default)
    ``gradguard serve`` on one machine: SQLite file, local executor. With no
    admin token configured one is generated at start-up and printed once.
``production``
    Settings refuse to load without a real admin token: a missing, short or
    placeholder value ("changeme", "secret", ...) is an error naming the
    variable and the fix.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["Settings", "PLACEHOLDER_SECRETS", "get_settings"]

PLACEHOLDER_SECRETS = frozenset(
    {"", "changeme", "change-me", "change_me", "changethis", "secret", "admin", "password", "token", "test", "xxx"}
)
MIN_SECRET_LENGTH = 16


class Settings(BaseSettings):
    """All knobs of the service. Field ``foo`` is read from ``GRADGUARD_FOO``."""

    model_config = SettingsConfigDict(env_prefix="GRADGUARD_", extra="ignore", frozen=True)

    mode: Literal["embedded", "production"] = "embedded"
    database_url: str = "sqlite:///./gradguard.sqlite3"
    admin_token: SecretStr | None = None
    public_url: str = ""  # prefix of the URLs returned to clients; "" means "as the request came in"

    executor: Literal["local", "celery"] = "local"
    local_workers: int = Field(2, ge=0, le=64)
    local_devices: Annotated[tuple[str, ...], NoDecode] = ("cpu",)
    poll_interval_s: float = Field(0.5, gt=0)
    broker_url: str = "redis://127.0.0.1:6379/0"
    queue_prefix: str = ""  # celery queues are f"{queue_prefix}cpu" and f"{queue_prefix}gpu"
    max_retries: int = Field(2, ge=0, le=20)
    lease_s: float = Field(120.0, gt=1)

    max_bundle_bytes: int = Field(10 * 2**20, gt=0)
    max_unpacked_bytes: int = Field(50 * 2**20, gt=0)
    max_files: int = Field(200, gt=0)
    max_path_length: int = Field(200, gt=0)
    rate_limit_per_minute: int = Field(60, ge=0)  # submissions per token; 0 disables
    read_rate_limit_per_minute: int = Field(1200, ge=0)  # GET/HEAD per client address; 0 disables

    run_wall_s: float = Field(120.0, gt=0)
    run_cpu_s: float = Field(120.0, gt=0)
    run_memory_mb: int = Field(2048, gt=0)
    # Each rule's own time limit, well below the run's wall limit, so one hanging rule cannot take
    # the others' verdicts with it (default: a quarter of run_wall_s; a submission may ask for another
    # value below run_wall_s).
    rule_timeout_s: float | None = Field(None, gt=0)
    # Each rule's own memory budget (how much it may grow the checker's resident memory), well below the
    # run's memory limit, so one rule that eats memory ends as its own error and the others still run
    # (default: a quarter of run_memory_mb; 0: none, the run's limit alone).
    rule_memory_mb: int | None = Field(None, ge=0)
    default_max_examples: int | None = Field(None, gt=0)

    # The floor under which workers refuse untrusted code (docs/security.md); rlimits needs the
    # explicit insecure switch, logged at start and shown on every run page.
    sandbox_min_level: Literal["bubblewrap", "namespaces", "rlimits"] = "namespaces"
    sandbox_insecure: bool = False
    worker_heartbeat_s: float = Field(10.0, gt=0)  # how often workers record their level (/readyz reads it)
    # May the service create an empty database at start? None: in embedded mode, unless it created one
    # at this SQLite path before; never in production (`gradguard migrate` does). See service/dbhealth.py.
    create_database: bool | None = None

    @field_validator("local_devices", mode="before")
    @classmethod
    def _split_devices(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(v.strip() for v in value.split(",") if v.strip())
        bad = [v for v in value if v not in ("cpu", "gpu")]  # type: ignore[union-attr]
        if bad:
            raise ValueError(f"Got local_devices={value!r}; each device must be 'cpu' or 'gpu' (GRADGUARD_LOCAL_DEVICES=cpu,gpu).")
        return value

    @model_validator(mode="after")
    def _rule_timeout_below_the_wall(self) -> "Settings":
        if self.rule_timeout_s is not None and self.rule_timeout_s >= self.run_wall_s:
            raise ValueError(
                f"Got GRADGUARD_RULE_TIMEOUT_S={self.rule_timeout_s:g}, but it must be below GRADGUARD_RUN_WALL_S="
                f"{self.run_wall_s:g}: a rule that hangs must end as its own error while the run still has time "
                "for the others. Lower the one or raise the other."
            )
        return self

    @model_validator(mode="after")
    def _rule_memory_below_the_run(self) -> "Settings":
        if self.rule_memory_mb and 2 * self.rule_memory_mb > self.run_memory_mb:
            raise ValueError(
                f"Got GRADGUARD_RULE_MEMORY_MB={self.rule_memory_mb}, but it must be at most half of "
                f"GRADGUARD_RUN_MEMORY_MB={self.run_memory_mb}: a rule that keeps allocating is interrupted at twice "
                "its budget at the latest, which must stay below the run's limit so that the rule ends as its own "
                "error while the others still run. Lower the one or raise the other (0: no per-rule budget)."
            )
        return self

    @model_validator(mode="after")
    def _rlimits_only_when_insecure(self) -> "Settings":
        if self.sandbox_min_level == "rlimits" and not self.sandbox_insecure:
            raise ValueError(
                "Got GRADGUARD_SANDBOX_MIN_LEVEL=rlimits, but the rlimits level does not isolate a submission "
                "from the host (it can read the service's files and reach the database and the network). "
                "Make bubblewrap or user namespaces work (docs/security.md), or, for trusted code only, "
                "also set GRADGUARD_SANDBOX_INSECURE=true."
            )
        return self

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> "Settings":
        if self.mode != "production":
            return self
        token = self.admin_token.get_secret_value() if self.admin_token else ""
        if token.strip().lower() in PLACEHOLDER_SECRETS or len(token) < MIN_SECRET_LENGTH:
            raise ValueError(
                "GRADGUARD_ADMIN_TOKEN is missing or a placeholder, which production mode refuses. "
                f"Set it to a random value of at least {MIN_SECRET_LENGTH} characters, e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`."
            )
        return self

    def with_admin_token(self) -> tuple["Settings", str | None]:
        """Return settings that hold an admin token, and the token if one had to be generated."""
        if self.admin_token is not None:
            return self, None
        token = secrets.token_urlsafe(32)
        return self.model_copy(update={"admin_token": SecretStr(token)}), token

    @property
    def default_rule_timeout_s(self) -> float:
        """The per-rule time limit of a run that asks for none."""
        return self.rule_timeout_s if self.rule_timeout_s is not None else self.run_wall_s / 4

    @property
    def default_rule_memory_mb(self) -> int:
        """The per-rule memory budget of every run, in MB (0: none)."""
        return self.rule_memory_mb if self.rule_memory_mb is not None else self.run_memory_mb // 4

    def queue_name(self, device: str) -> str:
        """Name of the Celery queue that serves ``device`` runs."""
        return f"{self.queue_prefix}{device}"


def get_settings() -> Settings:
    """Settings from the environment (a fresh read each call)."""
    return Settings()
