"""Recycling's checks and its world faults, read from the modelled world (never from the autoscaler's tags' meaning).

The world keeps, per machine, the last owner whose task ran on it and the boot it ran in; a scrub counts as proven only
when a ready node of the machine shows exactly the token its scrub tag names (pending-<token>, or done-<token> once
marked) and the machine's record says that token's scrub ran on a boot after that owner's (Machines.last_scrub): a
proof of another token, or one left on the disk by an earlier boot, proves nothing. From that:
- unscrubbed: no owner's task runs on a machine whose last owner was another, unless a scrub was proven in between;
- claim: no machine becomes an owner's (from the buffer's, or from another owner's), nor is its node labelled for
  another owner, while it owes its scrub (it served an owner and no proof followed), nor while another owner's volume
  is attached to it or mounted on its node;
- unaccepted: a machine that served an owner never becomes the machine of an owner none of whose groups accept
  recycled machines (effective_cache_policy, as the director writes the labels), whatever a person did to its tags;
- released (at the end, after the calm): a volume of an owner whose groups recycle, with no session of theirs still
  under way, is detached from every machine not its owner's or being recycled, and one no machine held for a resync
  and a busy cycle carries its released-at tag (it counts down its TTL); its deletion before the TTL is the
  delete-before-ttl check's, which holds for every volume;
- scrub-crashed (at the end): a machine whose scrub boot a fault killed (its node never comes back) is terminated.
The faults: a scrub boot dies ("scrub"); a person deletes, garbles or sets back a recycled machine's count or scrub tag
("tags"); a machine that owes its scrub reboots, or its scrub unit runs again ("reboot"); the metadata service answers
a boot that owes its scrub late ("metadata").
"""

from __future__ import annotations

from warmswarm_models import (
    ENGINE_LABEL_CACHE_VOLUME,
    ENGINE_LABEL_SCRUBBED,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    SCRUB_DONE_PREFIX,
    SCRUB_PENDING_PREFIX,
    VOLUME_RELEASED_AT_TAG,
    effective_cache_policy,
)

from warmswarm_simulator.cloud_values import SimInstance
from warmswarm_simulator.faults.checks import (
    RECYCLE_CLAIM,
    RECYCLE_RELEASED,
    RECYCLE_UNACCEPTED,
    RECYCLE_UNSCRUBBED,
    SCRUB_CRASHED,
)
from warmswarm_simulator.faults.dice import Dice
from warmswarm_simulator.faults.scenario import Scenario, owner_text
from warmswarm_simulator.faults.worldparts import BATCH, BUFFER, Parts, owner_of, task_owner, whose_instance

_NOT_OWNERS = (BUFFER, BATCH, "nobody")
_GONE = ("shutting-down", "terminated")
_METADATA_LATE_S = (5.0, 15.0, 30.0)  # within the boot's bounded retries (and a start timeout of 60 s)
# What a person's edit leaves in a tag: a typo, a value of another format, a legacy token, nothing.
_GARBLED = {
    INSTANCE_RECYCLED_TAG: ("2x", "", "-1", "one", "99999999999"),
    INSTANCE_SCRUB_TAG: ("pending-1", "pending-x.1772409600", "done", "scrubbed", "pending-", "done-2"),
}


class Recycling:
    def __init__(self, parts: Parts, scenario: Scenario, dice: Dice) -> None:
        self._parts = parts
        self._dice = dice
        policies: dict[str, list[str]] = {}
        for session in scenario.sessions:
            policies.setdefault(owner_text(session.owner), []).extend(session.groups)
        cache = {
            owner: effective_cache_policy(scenario.groups[g] for g in groups) for owner, groups in policies.items()
        }
        self._accepts = {owner: policy.accept_recycled for owner, policy in cache.items()}
        self._recycles = {owner for owner, policy in cache.items() if policy.recycle_machines}
        # instance id -> (the last owner whose task ran on it, the boot it ran in: SimInstance.boots)
        self._served: dict[str, tuple[str, int]] = {}
        self._proven: set[str] = set()  # machines whose scrub was proven on a boot after their last owner's task
        self._whose: dict[str, str] = {}  # instance id -> whose it was at the last check
        self.scrub_crashed: set[str] = set()  # machines whose scrub boot the "scrub" fault killed
        self.edited: set[str] = set()  # machines whose count or scrub tag a person edited (the "tags" fault)
        self._values: dict[tuple[str, str], list[str]] = {}  # (instance id, tag key) -> its values seen, in order
        self._edits: set[tuple[str, str | None]] = set()  # (instance id, value) a person wrote
        # The autoscaler's recycle marks and the scrubs it marked proven: (instance id, scrub tag value).
        self.marks: set[tuple[str, str]] = set()
        self.proofs: set[tuple[str, str]] = set()
        parts.machines.metadata_late_s = self._metadata_late_s
        # A recycling owner's volume id -> since when no live machine holds it (world s).
        self._unheld_since: dict[str, float] = {}
        # A recycle's stop, then its detach, then the release each take the next plan that sees the step before: two
        # resyncs and busy cycles (a stop lasts less than a busy cycle in the quick world).
        settings = scenario.settings
        self._release_within_s = 2.0 * float(settings.resync_interval_s + settings.busy_resync_interval_s)

    def _fail(self, check: str, message: str, subject: str) -> None:
        self._dice.history.fail(self._dice.cycle, check, message, subject)

    # -- the fault -------------------------------------------------------------------------------------------------

    def strike(self) -> None:
        """Before a cycle while faults are on: a scrub boot may crash; a person may edit a recycled machine's count or
        scrub tag; a machine that owes its scrub may reboot."""
        self._crash()
        self._edit_tags()
        self._reboot()

    def _metadata_late_s(self, instance: SimInstance) -> float:
        """How late the metadata service answers a boot that starts while its scrub is owed (the "metadata" kind): the
        boot's bounded retries wait it out, then it reads the tags and scrubs, late."""
        dice = self._dice
        if not instance.tags.get(INSTANCE_SCRUB_TAG, "").startswith(SCRUB_PENDING_PREFIX):
            return 0.0
        site = f"world metadata {instance.id} boot {instance.boots}"
        late_s = dice.pick(_METADATA_LATE_S, f"c{dice.cycle} {site} how late")
        detail = f"machine {instance.id}'s boot {instance.boots}: the metadata service answers {late_s:g} s late"
        return late_s if dice.fires("metadata", site, detail, owner=whose_instance(instance)) else 0.0

    def _edit_tags(self) -> None:
        """A person edits a recycled machine's count or scrub tag in EC2: deletes it, garbles it, or sets it back to
        an earlier value (one the machine carried, or the generation before)."""
        parts, dice = self._parts, self._dice
        traced = sorted(
            i.id
            for i in parts.cloud.instances.values()
            if i.state not in _GONE and (INSTANCE_RECYCLED_TAG in i.tags or INSTANCE_SCRUB_TAG in i.tags)
        )
        if not traced:
            return
        cycle = dice.cycle
        instance = parts.cloud.instances[dice.pick(traced, f"c{cycle} tags which")]
        key = dice.pick((INSTANCE_RECYCLED_TAG, INSTANCE_SCRUB_TAG), f"c{cycle} tags key")
        how = dice.pick(("lost", "garbled", "set back"), f"c{cycle} tags how")
        value = instance.tags.get(key)
        if how == "lost":
            new = None
        elif how == "garbled":
            new = dice.pick(_GARBLED[key], f"c{cycle} tags garble")
        else:
            new = self._earlier(instance.id, key, value)
        if new == value:
            return
        detail = f"a person {'deletes' if new is None else 'sets'} {key} of {instance.id} ({value!r}" + (
            ")" if new is None else f" -> {new!r}, {how})"
        )
        if not dice.fires("tags", "world tags", detail, owner=whose_instance(instance)):
            return
        self.edited.add(instance.id)
        self._edits.add((instance.id, new))
        if new is None:
            parts.cloud.untag_instance(instance.id, [key])
        else:
            parts.cloud.tag_instance(instance.id, {key: new})

    def _earlier(self, instance_id: str, key: str, value: str | None) -> str | None:
        seen = [v for v in self._values.get((instance_id, key), []) if v != value]
        if seen:
            return seen[-1]
        if key == INSTANCE_RECYCLED_TAG:
            return str(int(value) - 1) if value is not None and value.isdigit() and int(value) > 0 else value
        token = mark_token({INSTANCE_SCRUB_TAG: value}) if value is not None else None
        generation, dot, moment = (token or "").partition(".")
        if not generation.isdigit() or int(generation) <= 1:
            return value
        prefix = value[: len(value) - len(token or "")] if value else SCRUB_PENDING_PREFIX
        return f"{prefix}{int(generation) - 1}{dot}{moment}"

    def _note_values(self) -> None:
        """Each recycled machine's count and scrub tag values, in the order they were seen (for a set back); the
        autoscaler's marks (a pending- value) and the scrubs it marked proven (a done- value) among them, a person's
        edits left out."""
        for instance in self._parts.cloud.instances.values():
            for key in (INSTANCE_RECYCLED_TAG, INSTANCE_SCRUB_TAG):
                value = instance.tags.get(key)
                seen = self._values.setdefault((instance.id, key), [])
                if value is None or (seen and seen[-1] == value):
                    continue
                seen.append(value)
                if key != INSTANCE_SCRUB_TAG or (instance.id, value) in self._edits:
                    continue
                if value.startswith(SCRUB_PENDING_PREFIX):
                    self.marks.add((instance.id, value))
                elif value.startswith(SCRUB_DONE_PREFIX):
                    self.proofs.add((instance.id, value))

    def _reboot(self) -> None:
        """A running machine whose scrub tag is pending reboots (before its strip: still its owner's; after: its scrub
        boot under way or done, not yet marked), or its scrub unit runs a second time in the boot under way."""
        parts, dice = self._parts, self._dice
        owed = sorted(
            i.id
            for i in parts.cloud.instances.values()
            if i.state == "running"
            and i.tags.get(INSTANCE_SCRUB_TAG, "").startswith(SCRUB_PENDING_PREFIX)
            and i.id not in parts.machines.boots_failed
        )
        if not owed:
            return
        cycle = dice.cycle
        instance = parts.cloud.instances[dice.pick(owed, f"c{cycle} reboot which")]
        whose = whose_instance(instance)
        how = dice.pick(("reboots", "runs its scrub unit again"), f"c{cycle} reboot how")
        stage = "after its strip" if whose in _NOT_OWNERS else f"before its strip (still {whose}'s)"
        detail = f"machine {instance.id}, which owes its scrub ({stage}), {how}"
        if not dice.fires("reboot", "world reboot", detail, owner=whose):
            return
        if how == "reboots":
            parts.machines.reboot(instance.id)
        else:
            parts.machines.scrub_again(instance.id)

    def _crash(self) -> None:
        """A machine in its scrub boot (running, its scrub tag pending, not yet back) may crash there: its node never
        comes back."""
        parts, dice = self._parts, self._dice
        booting = sorted(
            i.id
            for i in parts.cloud.instances.values()
            if i.state == "running"
            and i.tags.get(INSTANCE_SCRUB_TAG, "").startswith(SCRUB_PENDING_PREFIX)
            and i.id not in parts.machines.boots_failed
            and not _joined_this_boot(parts, i)
        )
        if not booting:
            return
        instance_id = dice.pick(booting, f"c{dice.cycle} scrub which")
        detail = f"recycled machine {instance_id}: its scrub boot crashes (its node never comes back)"
        # The buffer's: the machine would have joined it once proven, so its loss may cost the buffer a launch.
        if dice.fires("scrub", "world scrub", detail, owner=BUFFER):
            parts.machines.boots_failed.add(instance_id)
            self.scrub_crashed.add(instance_id)

    # -- after every cycle -----------------------------------------------------------------------------------------

    def after_cycle(self) -> None:
        self._note_values()
        self._proofs()
        self._claims()
        self._tasks()
        self._note_unheld()

    def _note_unheld(self) -> None:
        parts = self._parts
        for volume in parts.cloud.volumes.volumes.values():
            if str(owner_of(volume.tags)) not in self._recycles:
                continue
            if self._owner_holds(volume.id):
                self._unheld_since.pop(volume.id, None)
            else:
                self._unheld_since.setdefault(volume.id, parts.world.now_s)

    def _owner_holds(self, volume_id: str) -> bool:
        """A live machine of the volume's owner, not being recycled, holds it."""
        parts = self._parts
        volume = parts.cloud.volumes.volumes[volume_id]
        attachment = volume.attachment
        holder = parts.cloud.instances.get(attachment.instance_id) if attachment is not None else None
        return (
            holder is not None
            and holder.state not in _GONE
            and whose_instance(holder) == str(owner_of(volume.tags))
            and not being_recycled(holder.tags)
        )

    def _proofs(self) -> None:
        """A scrub is proven when a ready node of the machine shows exactly the token its scrub tag asks for (pending-
        or, once marked, done-), and that token's scrub did run, on a boot after the last owner's: a proof of another
        token, or one left on the disk by an earlier boot, proves nothing."""
        parts = self._parts
        for instance_id, (_, boot) in self._served.items():
            instance = parts.cloud.instances[instance_id]
            node = parts.node_of(instance_id)
            if node is None or node.state != "ready" or instance.state != "running":
                continue
            token = mark_token(instance.tags)
            scrubbed_boot, scrubbed_token = parts.machines.last_scrub.get(instance_id, (0, ""))
            shown = node.engine_labels.get(ENGINE_LABEL_SCRUBBED)
            if token is not None and shown == token == scrubbed_token and scrubbed_boot > boot:
                self._proven.add(instance_id)

    def _claims(self) -> None:
        parts = self._parts
        for instance in parts.cloud.instances.values():
            now, before = whose_instance(instance), self._whose.get(instance.id)
            self._whose[instance.id] = now
            self._labelled(instance)
            if now in _NOT_OWNERS or before is None or before == now or before in (BATCH, "nobody"):
                continue
            served = self._served.get(instance.id)
            if served is not None and instance.id not in self._proven:
                self._fail(
                    RECYCLE_CLAIM,
                    f"machine {instance.id} became {now}'s (it was {before}'s) while it owes its scrub: it served"
                    f" {served[0]} and no scrub was proven since",
                    instance.id,
                )
            self._held(instance.id, now, before)
            if served is not None and not self._accepts.get(now, False):
                edited = " (a person had edited its count or scrub tag)" if instance.id in self.edited else ""
                self._fail(
                    RECYCLE_UNACCEPTED,
                    f"machine {instance.id}, which served {served[0]}, went to {now}, whose groups do not accept"
                    f" recycled machines{edited}",
                    instance.id,
                )

    def _labelled(self, instance: SimInstance) -> None:
        """No node of a machine that owes its scrub is labelled for an owner other than the one it served."""
        served = self._served.get(instance.id)
        node = self._parts.node_of(instance.id)
        if served is None or node is None or instance.id in self._proven:
            return
        labelled = owner_of(node.labels)
        if labelled is not None and not labelled.is_nobody and str(labelled) != served[0]:
            self._fail(
                RECYCLE_CLAIM,
                f"the node of machine {instance.id} is labelled for {labelled} while it owes its scrub: it served"
                f" {served[0]} and no scrub of the token its tag asks for was proven since",
                instance.id,
            )

    def _held(self, instance_id: str, now: str, before: str) -> None:
        parts = self._parts
        for volume in parts.cloud.volumes.volumes.values():
            attachment = volume.attachment
            if attachment is None or attachment.instance_id != instance_id or str(owner_of(volume.tags)) == now:
                continue
            self._fail(
                RECYCLE_CLAIM,
                f"machine {instance_id} became {now}'s (it was {before}'s) while volume {volume.id} of"
                f" {owner_of(volume.tags)} is {attachment.state} to it",
                instance_id,
            )
        node = parts.node_of(instance_id)
        mounted = parts.cloud.volumes.get(node.engine_labels.get(ENGINE_LABEL_CACHE_VOLUME, "")) if node else None
        if mounted is not None and str(owner_of(mounted.tags)) != now:
            self._fail(
                RECYCLE_CLAIM,
                f"machine {instance_id} became {now}'s (it was {before}'s) while its node mounts volume {mounted.id}"
                f" of {owner_of(mounted.tags)}",
                instance_id,
            )

    def _tasks(self) -> None:
        parts = self._parts
        for node in parts.swarm.nodes.values():
            instance = parts.instance_of(node)
            if instance is None:
                continue
            for task in parts.active_tasks_on(node):
                owner = task_owner(task)
                if owner.is_nobody:
                    continue
                served = self._served.get(instance.id)
                if served is not None and served[0] != str(owner) and instance.id not in self._proven:
                    self._fail(
                        RECYCLE_UNSCRUBBED,
                        f"task {task.id} of {owner} runs on machine {instance.id}, which served {served[0]} with no"
                        " scrub proven since",
                        instance.id,
                    )
                self._served[instance.id] = (str(owner), instance.boots)
                self._proven.discard(instance.id)

    # -- at the end ------------------------------------------------------------------------------------------------

    def at_end(self) -> None:
        """Once the calm has lasted: recycling owners' volumes released, crashed scrubs terminated."""
        parts = self._parts
        for volume in parts.cloud.volumes.volumes.values():
            owner = str(owner_of(volume.tags))
            if owner not in self._recycles or volume.state == "deleted" or owner in self._in_session():
                continue  # a session of the owner's not yet over may still need the volume (a launch waits for it)
            unheld_s = parts.world.now_s - self._unheld_since.get(volume.id, parts.world.now_s)
            if self._owner_holds(volume.id) or unheld_s <= self._release_within_s:
                continue  # its owner's; or left (a recycle's stop and detach, then its release) too lately to judge
            attachment = volume.attachment
            holder = parts.cloud.instances.get(attachment.instance_id) if attachment is not None else None
            if holder is not None and holder.state not in _GONE:
                self._fail(
                    RECYCLE_RELEASED,
                    f"volume {volume.id} of {owner} ends {attachment.state if attachment else ''} to {holder.id} of"
                    f" {whose_instance(holder)} ({unheld_s:.0f} s after its owner's machine let it go)",
                    volume.id,
                )
            elif VOLUME_RELEASED_AT_TAG not in volume.tags:
                self._fail(
                    RECYCLE_RELEASED,
                    f"volume {volume.id} of {owner} ends held by no machine for {unheld_s:.0f} s, never released",
                    volume.id,
                )
        for instance_id in sorted(self.scrub_crashed):
            instance = parts.cloud.instances[instance_id]
            if instance.state not in _GONE:
                self._fail(
                    SCRUB_CRASHED,
                    f"machine {instance_id}, whose scrub boot crashed, ends {instance.state} (whose:"
                    f" {whose_instance(instance)})",
                    instance_id,
                )

    def _in_session(self) -> set[str]:
        """The owners with a session requested and not over."""
        return {
            owner_text(r.session.owner)
            for r in self._parts.platform.records
            if r.service_id is not None and r.ended_s is None
        }


def _joined_this_boot(parts: Parts, instance: SimInstance) -> bool:
    """Its node joined since the instance's last start: its scrub boot is over (a node down since, dropped out, is not
    a scrub boot to crash: seed 1173 struck one whose node came back with its proof)."""
    node = parts.node_of(instance.id)
    began_s = parts.machines.boot_began_s.get(instance.id, instance.launched_at_s)
    return node is not None and node.up_since_s >= began_s


def mark_token(tags: dict[str, str]) -> str | None:
    """The scrub token the machine's scrub tag names (pending-<token> or done-<token>), as written; None without."""
    scrub = tags.get(INSTANCE_SCRUB_TAG, "")
    for prefix in (SCRUB_PENDING_PREFIX, SCRUB_DONE_PREFIX):
        if scrub.startswith(prefix):
            return scrub[len(prefix) :]
    return None


def being_recycled(tags: dict[str, str]) -> bool:
    """Marked and not yet proven: a scrub tag that does not read done-. A machine that was recycled once and proven
    (done-<token>) and then claimed is its new owner's like any other: it may hold their volume, stopped in their warm
    tier included (seed 27970: a hot-claimed recycled machine stopped warm with its owner's volume attached, which
    the check took for a recycle that never let the volume go)."""
    scrub = tags.get(INSTANCE_SCRUB_TAG)
    return scrub is not None and not scrub.startswith(SCRUB_DONE_PREFIX)
