"""The file format of a saved boosted ensemble: a folder of one JSON file and K Keras files.

It knows no estimator class: it writes and reads a meta dict and a list of member models. What the
meta dict holds besides the format's own keys is the caller's business (`_checkpoint.py`).

Layout of a saved directory:

    boost.json                      the caller's meta dict plus the format's keys: `format`,
                                    `format_version`, `n_rounds` (the member count) and `members`
                                    (each member's file name and SHA-256 digest)
    member_000_<sha256[:12]>.keras  one Keras file per member, named after its content

"""

import json
import os
import re

import keras

from gradkit import _io

FORMAT = "gradkit.boosting"
VERSION = 1
META = "boost.json"
_TMP = ".gradkit-tmp-"
_MEMBER = re.compile(r"member_\d{3,}_[0-9a-f]{12}\.keras")


def exists(path):
    """True when `path` holds a `boost.json` (a finished save or checkpoint)."""
    return os.path.isfile(os.path.join(os.fspath(path), META))


def record(path, members):
    """What a folder is known to hold: `{"dir": realpath, "members": [{"file", "sha256"}, ...]}`."""
    return {"dir": os.path.realpath(path), "members": list(members)}


def _write_member(model, path, index):
    tmp = _io.write_temporary(path, model.save, prefix=_TMP, suffix=".keras")
    sha = _io.sha256(tmp)
    name = f"member_{index:03d}_{sha[:12]}.keras"
    os.replace(tmp, os.path.join(path, name))
    return {"file": name, "sha256": sha}


def _write_meta(meta, path):
    text = _io.to_json(meta, indent=1, sort_keys=True)

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    os.replace(_io.write_temporary(path, write, prefix=_TMP, suffix=".json"), os.path.join(path, META))


def write(path, meta, members, *, previous=None):
    """Writes `meta` and the Keras `members` into the directory `path` (created if needed), atomically.

    Every file is written under a temporary name in the same directory, flushed to disk and moved into
    place with `os.replace`. Members are written before `boost.json`, and files of an earlier save are
    deleted only after the new `boost.json` is in place, so a reader (or a resumed fit) always sees one
    complete save, never a partial round. Saving into a directory again writes only the members it does
    not hold yet (the per-round checkpoints of `fit(checkpoint_dir=...)`).

    Args:
        path: directory (str or path-like). Other files in it are left alone, except this format's
            own `member_*.keras` files that the new `boost.json` no longer lists, and temporary files.
        meta: a JSON-able dict; the keys `format`, `format_version`, `n_rounds` and `members` are set here.
        members: K Keras models, written in order.
        previous: the `record` of an earlier save; members it lists for this same directory, and
            that are still there, are not written again. Defaults to None.

    Returns:
        The `record` of this save.

    Raises:
        ValueError: `meta` holds NaN, inf or values JSON cannot hold; OSError from the file system.
    """
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    previous = previous or {}
    reuse = previous.get("members", []) if previous.get("dir") == os.path.realpath(path) else []
    files = []
    for i, model in enumerate(members):
        if i < len(reuse) and os.path.isfile(os.path.join(path, reuse[i]["file"])):
            files.append(reuse[i])
        else:
            files.append(_write_member(model, path, i))
    meta = {**meta, "format": FORMAT, "format_version": VERSION, "n_rounds": len(files), "members": files}
    _write_meta(meta, path)
    _io.fsync_dir(path)
    listed = {f["file"] for f in files}
    for name in os.listdir(path):
        if (_MEMBER.fullmatch(name) and name not in listed) or name.startswith(_TMP):
            os.remove(os.path.join(path, name))
    return record(path, files)


def corrupt(path, why):
    """The error for a folder that is not one complete save."""
    return ValueError(f"{path!r} is not a complete gradkit boosting save ({why}); nothing was loaded.")


def _load_json(path):
    if not os.path.isdir(path):
        raise ValueError(f"`path` must be a directory written by save(). Received: path={path!r}")
    meta_path = os.path.join(path, META)
    if not os.path.isfile(meta_path):
        raise corrupt(path, f"no {META}: not a boosting save, or a save that never finished")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise corrupt(path, f"{META} is unreadable: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise corrupt(path, f"{META} is not a {FORMAT} file")
    if meta.get("format_version") != VERSION:
        raise corrupt(path, f"format_version {meta.get('format_version')!r}, this gradkit reads {VERSION}")
    return meta


def read_meta(path, validate=None):
    """The meta dict of a complete save, every member file present and matching its SHA-256.

    Args:
        path: the saved directory.
        validate: optional `validate(meta) -> bool` for the caller's keys: False, KeyError,
            TypeError or ValueError make the folder refused as inconsistent or garbled.

    Raises:
        ValueError: not a directory, no or unreadable `boost.json`, another format or version, an
            inconsistent meta dict, a missing member file or one whose SHA-256 differs.
    """
    path = os.fspath(path)
    meta = _load_json(path)
    try:
        n = int(meta["n_rounds"])
        ok = n >= 1 and len(meta["members"]) == n and (validate is None or validate(meta))
    except (KeyError, TypeError, ValueError) as e:
        raise corrupt(path, f"{META} lacks or garbles {e}") from e
    if not ok:
        raise corrupt(path, f"{META} is inconsistent (round counts, classes or weights)")
    for member in meta["members"]:
        name = member.get("file", "") if isinstance(member, dict) else ""
        filename = os.path.join(path, name)
        if not _MEMBER.fullmatch(name) or not os.path.isfile(filename):
            raise corrupt(path, f"member file {name!r} is missing")
        if _io.sha256(filename) != member.get("sha256"):
            raise corrupt(path, f"member file {name!r} does not match its SHA-256 in {META}")
    return meta


def read_members(path, meta, *, safe_mode=True):
    """The member models listed in `meta` (from `read_meta`), loaded with `keras.saving.load_model`.

    Raises:
        ValueError: a member Keras cannot load, or refuses in safe mode.
    """
    path, models = os.fspath(path), []
    for member in meta["members"]:
        filename = os.path.join(path, member["file"])
        try:
            models.append(keras.saving.load_model(filename, safe_mode=safe_mode))
        except Exception as e:  # noqa: BLE001 - any failure means nothing is returned
            hint = " Pass safe_mode=False to gradkit.load only if you trust the files." if safe_mode else ""
            raise ValueError(f"Could not load member {member['file']!r} of {path!r}: {e}{hint}") from e
    return models
