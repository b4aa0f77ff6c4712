"""The model registry: which trained models exist, how they scored, and which one is current.

Beside the datasets, on the same fsspec root::

    <root>/registry/models/<version>.json   one entry per registered model (training set, parameters,
                                            training summary, benchmark scores, the gate's decision)
    <root>/registry/history/<n>.json        the pointer after the n-th promotion or rollback
                                            (00000001.json, ...), each created once and never rewritten
    <root>/registry/current.json            the pointer: the current version and the history of the
                                            pointer (promotions and rollbacks), newest last; a copy
                                            of the newest history file

Promotion is a compare-and-swap: it reads the pointer (n promotions so far), checks the version it
expects to replace, and creates ``history/<n+1>.json`` only if it does not exist
(storage.atomic.write_exclusive: a hard link on a local root, the store's conditional write on S3,
GCS and Azure; other stores are refused). Of two promotions from the same pointer exactly one
creates it; the other reads the pointer again and refuses (PromotionConflict) when it no longer
names the expected version. The history file is the commit point: ``current.json`` is rewritten
after it, and a reader that finds a newer history file than ``current.json`` names (a promotion
cut short before rewriting it, or overtaken by a later one) reads that instead. A crash before the
history file is created leaves the old model current. The pointer carries its own history, so
history and pointer cannot disagree.

Only promotion (and rollback, which is a promotion of an earlier model) moves the pointer:
registering a model never does.

Every version given to the registry, and every version read from the pointer, must match
:data:`storage.datasets.VERSION_PATTERN` (InvalidModelVersion otherwise): a version is never a path,
so neither an argument nor an edited ``current.json`` reaches a file outside the root.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from storage.atomic import ExclusiveWriteUnsupported, atomic_write_text, clean_leftovers, write_exclusive
from storage.datasets import MANIFEST, ManifestError, check_version, resolve_root
from storage.files import FileSet
from storage.stores import is_local_root, store
from pearl_redact import redact

REGISTRY = "registry"
CURRENT = "current.json"
HISTORY = "history"
_ATTEMPTS = 20  # an unconditional promotion retries this often when others keep promoting first
CURRENT_SPEC = "current"  # what `pearl encode` and the evaluate flow accept for "the current model"
_UNSET = object()
# what an entry must hold for the registry to list, summarise and promote it
ENTRY_KEYS = ("version", "url", "training_set", "training", "trained_at", "registered_at")


class RegistryError(RuntimeError):
    """A registry operation that cannot be done as asked (the message says why)."""


class ModelNotRegistered(RegistryError, KeyError):
    """No registry entry for this version."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else ""


class InvalidModelVersion(RegistryError, ValueError):
    """A model version that does not match the version pattern (a RegistryError, so the CLI reports it)."""


def _is_version(name: str) -> bool:
    try:
        check_version("model version", name)
    except ValueError:
        return False
    return True


def _checked(version: object, what: str = "model version") -> str:
    try:
        return check_version(what, version)
    except ValueError as e:
        raise InvalidModelVersion(str(e)) from None


class NoCurrentModel(RegistryError):
    """Nothing has been promoted on this storage root yet."""


class PromotionConflict(RegistryError):
    """The current model changed between the gate's reading of it and the promotion."""


def _read_json(fs, path: str, required: tuple[str, ...]) -> dict:
    """A registry file as a dict; RegistryError (not a raw JSON or key error) for one that is not
    a JSON object with ``required`` keys, e.g. after a hand edit. FileNotFoundError passes through."""
    data = fs.cat_file(path)  # one request: a file rewritten between a look-up and a read is no error
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise RegistryError(f"{path} is not valid JSON ({e}): fix or restore it") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{path} is not a JSON object: fix or restore it")
    missing = [k for k in required if k not in doc]
    if missing:
        raise RegistryError(f"{path} lacks {', '.join(missing)}: fix or restore it")
    return doc


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


class ModelRegistry:
    """The registry of one storage root (a local path or an fsspec URL)."""

    def __init__(self, storage_root: str):
        self.root = resolve_root(storage_root)
        fs, base = store(self.root)
        self.fs, self.root_path = fs, base.rstrip("/")
        self.base = f"{self.root_path}/{REGISTRY}"

    # --- entries -------------------------------------------------------------------------
    def _entry_path(self, version: str) -> str:
        return f"{self.base}/models/{_checked(version)}.json"

    def model(self, version: str) -> FileSet:
        return FileSet(self.root, "models", _checked(version))

    def register(self, version: str, benchmark: dict | None = None, decision: dict | None = None,
                 run: dict | None = None) -> dict:
        """Record a stored model (and, when given, its benchmark scores and the gate's decision).

        Re-registering a version replaces its entry (a later evaluation, a new decision) but keeps
        when it was first registered. Raises RegistryError for a model that is not stored whole."""
        model = self.model(version)
        if not model.is_complete():
            raise RegistryError(f"model {version} is not stored whole under {model.url} (no manifest): "
                                "only a finished model can be registered")
        man = model.manifest()
        meta = man.get("stats", {})
        try:
            first = self.entry(version)["registered_at"]
        except ModelNotRegistered:
            first = _now()
        entry = redact({
            "version": version,
            "url": model.url,
            "training_set": man["inputs"].get("training_set"),
            "char_encoder": man["inputs"].get("char_encoder"),
            "backbone": man["params"].get("backbone"),
            "params": man["params"],
            "training": {k: meta.get(k) for k in ("steps", "train_phrases", "validation_phrases", "seconds",
                                                    "anchors_per_s", "device", "val_loss", "val_type_acc")
                         if k in meta},
            "trained_at": man["created_at"],
            "git_commit": man.get("git_commit"),
            "registered_at": first,
            "updated_at": _now(),
            "benchmark": benchmark,
            "decision": decision,
            "run": run,
        })
        self.fs.makedirs(f"{self.base}/models", exist_ok=True)
        clean_leftovers(self.fs, f"{self.base}/models")
        atomic_write_text(self.fs, self._entry_path(version), json.dumps(entry, indent=2, default=str))
        return entry

    def _entry_file(self, path: str) -> dict:
        """A model's entry: RegistryError unless its fields are of the types register() writes and its
        version is the one its file name says (what summary() and the CLI read without more checks)."""
        e = _read_json(self.fs, path, ENTRY_KEYS)
        types = {"url": str, "trained_at": str, "registered_at": str, "training": dict,
                 "training_set": (str, type(None)), "benchmark": (dict, type(None)), "decision": (dict, type(None))}
        wrong = [k for k, t in types.items() if not isinstance(e.get(k), t)]
        if wrong:
            raise RegistryError(f"{path}: {', '.join(wrong)} not as the registry writes them: fix or restore it")
        if _checked(e["version"]) != path.rsplit("/", 1)[-1].removesuffix(".json"):
            raise RegistryError(f"{path}: names version {e['version']}, not its own: fix or restore it")
        return e

    def entry(self, version: str) -> dict:
        try:
            return self._entry_file(self._entry_path(version))
        except FileNotFoundError:
            raise ModelNotRegistered(f"model {version} is not in the registry under {redact(self.root)}") from None

    def entries(self) -> list[dict]:
        """Every registered model, oldest registration first."""
        try:
            paths = self.fs.glob(f"{self.base}/models/*.json")
        except FileNotFoundError:
            paths = []
        out = [self._entry_file(p) for p in paths]
        return sorted(out, key=lambda e: e["registered_at"])

    def summary(self) -> list[dict]:
        """One row per registered model, newest first, the current one marked: what
        `pearl models list` prints and the `model-registry` artifact shows."""
        current = self.current_version()
        rows = []
        for e in reversed(self.entries()):
            rows.append({"version": e["version"], "current": "yes" if e["version"] == current else "",
                         "trained_at": e["trained_at"][:19], "training_set": e["training_set"],
                         "steps": e["training"].get("steps"),
                         "benchmark_average": (e.get("benchmark") or {}).get("average"),
                         "decision": (e.get("decision") or {}).get("outcome", "")})
        return rows

    def stored_versions(self) -> list[str]:
        """The versions stored whole (with a manifest) under ``<root>/models/``, registered or not: a
        `train` run exports a model there without registering it."""
        models = f"{self.root_path}/models"
        try:
            paths = self.fs.glob(f"{models}/*/{MANIFEST}")
        except FileNotFoundError:
            paths = []
        versions = (p.rsplit("/", 2)[-2] for p in paths)
        return sorted(v for v in versions if _is_version(v))  # a directory no version names is not listed

    def listing(self) -> list[dict]:
        """summary()'s rows, each with its state (``current`` or ``registered``), and a row from its
        manifest for each model stored whole but never registered (``not registered``); newest
        trained first. What `pearl models list` prints."""
        rows = [{**r, "state": "current" if r["current"] else "registered"} for r in self.summary()]
        known = {r["version"] for r in rows}
        for version in self.stored_versions():
            if version in known:
                continue
            try:
                man = self.model(version).manifest()
            except ManifestError as e:  # a hand-edited manifest: one line from the CLI, as a bad entry is
                raise RegistryError(str(e)) from None
            rows.append({"version": version, "current": "", "state": "not registered",
                         "trained_at": str(man.get("created_at", ""))[:19],
                         "training_set": (man.get("inputs") or {}).get("training_set"),
                         "steps": (man.get("stats") or {}).get("steps"), "benchmark_average": None, "decision": ""})
        return sorted(rows, key=lambda r: r["trained_at"], reverse=True)

    # --- the pointer ---------------------------------------------------------------------
    def _history_path(self, n: int) -> str:
        return f"{self.base}/{HISTORY}/{n:08d}.json"

    def _pointer_file(self, path: str, n: int | None = None) -> dict:
        """current.json, or history file ``n``: RegistryError unless it is a JSON object with a version
        and a history list (of n entries for history file n, so that reading on always moves forward)."""
        ptr = _read_json(self.fs, path, ("version", "history"))
        if not isinstance(ptr["history"], list) or n is not None and len(ptr["history"]) != n:
            raise RegistryError(f"{path}: its history is not a list" + (f" of {n} entries" if n else "")
                                + ": fix or restore it")
        return ptr

    def pointer(self) -> dict | None:
        """The current pointer with its history, or None before the first promotion."""
        path = f"{self.base}/{CURRENT}"
        ptr = None
        try:
            ptr = self._pointer_file(path)
        except FileNotFoundError:
            pass
        while True:  # promotions newer than current.json (cut short, or overtaken): the history files decide
            n = len(ptr["history"]) + 1 if ptr else 1
            try:
                ptr, path = self._pointer_file(self._history_path(n), n), self._history_path(n)
            except FileNotFoundError:
                break
        if ptr is None:
            return None
        _checked(ptr.get("version"), f"the current version in {path}")
        if ptr.get("previous") is not None:  # what a rollback goes back to
            _checked(ptr["previous"], f"the previous version in {path}")
        return ptr

    def current_version(self) -> str | None:
        ptr = self.pointer()
        return ptr["version"] if ptr else None

    def current_model(self) -> FileSet:
        """The current model's files; NoCurrentModel before the first promotion."""
        version = self.current_version()
        if version is None:
            raise NoCurrentModel(f"no current model under {redact(self.root)}: nothing has been promoted yet "
                                 "(run the retrain deployment, or `pearl models promote VERSION`)")
        return self.model(version)

    def promote(self, version: str, reason: str, *, expected_current=_UNSET, action: str = "promote") -> dict:
        """Make ``version`` current, atomically. ``expected_current`` (a version or None): refuse with
        PromotionConflict when the pointer no longer names it (another promotion came first, even
        one running at this moment in another process). Without it, a promotion that loses a race
        goes after the winner."""
        entry = self.entry(version)  # only registered models become current
        if not self.model(version).is_complete():
            raise RegistryError(f"model {version} is registered but its files are not whole at {entry['url']}")
        for _ in range(_ATTEMPTS):
            ptr = self.pointer()
            now_current = ptr["version"] if ptr else None
            if expected_current is not _UNSET and expected_current != now_current:
                raise PromotionConflict(f"the current model is {now_current}, not {expected_current} as expected: "
                                        f"not promoting {version}")
            history = list(ptr["history"]) if ptr else []
            at = _now()
            history.append({"version": version, "at": at, "action": action, "reason": reason,
                            "previous": now_current})
            new = redact({"version": version, "url": entry["url"], "promoted_at": at, "reason": reason,
                          "previous": now_current, "history": history})
            text = json.dumps(new, indent=2)
            try:
                if write_exclusive(self.fs, self._history_path(len(history)), text):
                    break  # the commit point: this promotion is the n-th
            except ExclusiveWriteUnsupported as e:
                raise RegistryError(f"cannot promote on {redact(self.root)}: {e}") from None
            # another promotion took the n-th place: read the pointer again (and check it again)
        else:
            raise PromotionConflict(f"other promotions kept coming first: not promoting {version}")
        clean_leftovers(self.fs, self.base)
        atomic_write_text(self.fs, f"{self.base}/{CURRENT}", text)
        return new

    def rollback(self, to: str | None = None, reason: str | None = None) -> dict:
        """Point back at ``to``, or at the model that was current before the current one."""
        if to is not None:
            _checked(to)  # a bad argument is named before anything else is said
        ptr = self.pointer()
        if ptr is None:
            raise NoCurrentModel(f"no current model under {redact(self.root)}: nothing to roll back")
        if to is None:
            to = ptr.get("previous")
            if to is None:
                raise RegistryError(f"{ptr['version']} is the first model ever promoted: nothing to roll back to")
        if to == ptr["version"]:
            raise RegistryError(f"{to} is already the current model")
        return self.promote(to, reason or f"rollback from {ptr['version']}", expected_current=ptr["version"],
                            action="rollback")


@dataclass(frozen=True)
class ResolvedModel:
    """A model spec with `current` resolved: ``spec`` what this process loads, ``name`` how to name it,
    ``version`` the registry's version when it is the current model, ``note`` why the fallback
    was taken (None when it was not), ``location`` what another process is handed to load it
    (:func:`model_location`; None: ``spec``)."""

    spec: str
    name: str
    version: str | None = None
    note: str | None = None
    location: str | None = None

    @property
    def shared(self) -> str:
        """The spec to hand a Dask worker, which loads it with :func:`loadable_spec`."""
        return self.location or self.spec


def stored_model_at(url: str) -> FileSet | None:
    """The stored model a URL in an object store names (``<root>/models/<version>``, as `pearl models`
    and a training's summary show it); None for a path or a name, which a loader opens as it is. A URL
    in a store that names no stored model is refused (ValueError): a model read from a store is read
    against its manifest, and only a stored model has one."""
    if is_local_root(url):
        return None
    root, name, version = (url.rstrip("/").rsplit("/", 2) + ["", ""])[:3]
    if name != "models" or "://" not in root:
        raise ValueError(f"{url} names no stored model: a model in an object store is given as "
                         "<storage root>/models/<version>")
    return FileSet(resolve_root(root), "models", check_version("model version", version))


def model_location(model: FileSet) -> str:
    """Where any process finds a stored model: its directory on a local root (loaded in place), its URL
    in an object store, which each process that loads it turns into its own checked copy
    (:func:`loadable_spec`). Never one process's downloaded copy: a Dask worker or another work pool's
    machine has no such path. What the evaluation and the gate name a stored model by."""
    return str(model.local_copy()) if is_local_root(model.root) else model.url


def loadable_spec(spec: str) -> str:
    """What this process loads for a model spec: a stored model's URL in an object store -> this
    machine's checked copy (:func:`stored_model_at`); a path or a name as it is."""
    stored = stored_model_at(spec)
    return spec if stored is None else str(stored.local_copy())


def resolve_model(spec: str, registry: ModelRegistry | str, fallback: str) -> ResolvedModel:
    """``current`` -> the current model's local directory; before the first promotion ``fallback``
    (the default backbone, which this floor does not know), with a note saying so. A stored model's URL
    in an object store -> its checked local copy (:func:`stored_model_at`). Any other spec is returned
    as it is. `pearl encode` / `pearl link` and the link flow resolve `--model` by this."""
    if spec != CURRENT_SPEC:
        return ResolvedModel(loadable_spec(spec), spec, location=spec)
    registry = registry if isinstance(registry, ModelRegistry) else ModelRegistry(registry)
    try:
        model = registry.current_model()
    except NoCurrentModel as e:
        return ResolvedModel(fallback, fallback, None, f"{e}; using the backbone {fallback}")
    location = model_location(model)  # a local root's directory is checked once, not copied and checked again
    return ResolvedModel(loadable_spec(location), f"current: {model.version}", model.version, location=location)


def resolve_model_spec(spec: str, storage_root: str) -> str:
    """``current`` -> the current model's location (:func:`model_location`; NoCurrentModel if none);
    any other spec (a backbone name, a model directory, a stored model's URL) as it is: the spec handed
    to the processes that load it, each with :func:`loadable_spec`."""
    if spec != CURRENT_SPEC:
        return spec
    return model_location(ModelRegistry(storage_root).current_model())

