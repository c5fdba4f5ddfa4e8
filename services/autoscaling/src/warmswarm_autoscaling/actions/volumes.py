"""The cache volumes' actions: create, attach, detach, grow, release, renew, a new TTL, delete, an operator's expiry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from warmswarm_models import Owner

from warmswarm_autoscaling.actions.base import _Described


@dataclass(frozen=True, slots=True)
class CreateVolume(_Described):
    kind: ClassVar[str] = "create_volume"
    verb: ClassVar[str] = "CreateVolume"
    owner: Owner
    availability_zone: str
    size_gib: int
    volume_type: str
    ttl_s: int
    client_token: str
    reason: str

    @property
    def target(self) -> str:
        return f"{self.owner} in {self.availability_zone}"


@dataclass(frozen=True, slots=True)
class AttachVolume(_Described):
    kind: ClassVar[str] = "attach_volume"
    verb: ClassVar[str] = "AttachVolume"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    instance_id: str
    device: str
    reason: str


@dataclass(frozen=True, slots=True)
class DetachVolume(_Described):
    kind: ClassVar[str] = "detach_volume"
    verb: ClassVar[str] = "DetachVolume"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    instance_id: str
    force: bool
    reason: str


@dataclass(frozen=True, slots=True)
class GrowVolume(_Described):
    """Its node reports the volume nearly full while its owner works: EBS grows it online, `from_gib` to `to_gib`
    (ModifyVolume), and the growth's moment is tagged (warmswarm:grown-at), as AWS allows one in six hours."""

    kind: ClassVar[str] = "modify_volume"
    verb: ClassVar[str] = "GrowVolume"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    from_gib: int
    to_gib: int
    reason: str

    def details(self) -> Mapping[str, object]:
        return {"from_gib": self.from_gib, "to_gib": self.to_gib}


@dataclass(frozen=True, slots=True)
class ReleaseVolume(_Described):
    """The volume's machine is gone: its time-to-live starts, `released_at` to `expires_at` (epoch s)."""

    kind: ClassVar[str] = "tag_volume"
    verb: ClassVar[str] = "ReleaseVolume"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    released_at: float
    expires_at: float
    # The TTL to write down beside them, when the volume had none that could be read (the next reader agrees).
    write_ttl_s: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class RenewVolume(_Described):
    """Its owner is back: the volume is theirs again and no longer expires (its release is undone)."""

    kind: ClassVar[str] = "tag_volume"
    verb: ClassVar[str] = "RenewVolume"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class SetVolumeTtl(_Described):
    """The owner's cache policy now keeps the volume this long after its release."""

    kind: ClassVar[str] = "tag_volume"
    verb: ClassVar[str] = "SetVolumeTtl"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    ttl_s: int
    reason: str


@dataclass(frozen=True, slots=True)
class DeleteVolume(_Described):
    kind: ClassVar[str] = "delete_volume"
    verb: ClassVar[str] = "DeleteVolume"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ExpireVolume(_Described):
    """An operator's early expiry (POST /v1/volumes/{id}/expire), never planned: the janitor deletes it next."""

    kind: ClassVar[str] = "expire_volume"
    verb: ClassVar[str] = "ExpireVolume"
    target_field: ClassVar[str] = "volume_id"
    volume_id: str
    expires_at: float  # epoch s: now
    reason: str
