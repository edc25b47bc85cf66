"""vramfit.compare: `vramfit compare` with snapshot= as a file (JSON or _dump_snapshot()'s
pickle) or the snapshot's dict itself; a pickle is read without torch, by an unpickler that
builds only dicts, lists, tuples, strings and numbers."""

import io
import json
import os
import pickle
import tempfile

from ._cli import Error
from ._commands import _command
from ._results import Result

_run = _command("compare", "compare", Result,
                "Result\n    The measured peaks beside the predicted ones, their phases and the "
                "largest differences.")


class _PlainUnpickler(pickle.Unpickler):
    """A snapshot's pickle holds plain containers only: any class or function it names is
    refused, so that loading it runs no code."""

    def find_class(self, module, name):
        raise Error(f"snapshot=: the pickle names {module}.{name}: a torch.cuda.memory._snapshot() "
                    f"holds only dicts, lists, strings and numbers")


def _snapshot_json(snapshot):
    """The snapshot as the JSON text the tool reads, or None when it is a JSON file already."""
    if isinstance(snapshot, dict):
        data = snapshot
    else:
        path = os.fspath(snapshot)
        with open(path, "rb") as f:
            head = f.read(1)
            if head != b"\x80":  # not a pickle (protocol 2 and later begin 0x80): the tool reads it
                return None
            f.seek(0)
            try:
                data = _PlainUnpickler(f).load()
            except Error:
                raise
            except Exception as e:  # a truncated or corrupt pickle
                raise Error(f"snapshot= {path!r:.80}: not a readable pickle: {e}") from None
    try:
        return json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Error(f"snapshot=: not a torch.cuda.memory._snapshot(): {e}") from None


def compare(snapshot=None, **options):
    """`vramfit compare`: a measured run beside the prediction for its configuration (train's
    options as keywords). snapshot= takes torch.cuda.memory._snapshot()'s dict, its pickle
    (torch.cuda.memory._dump_snapshot) or a JSON file of it; log= a torchtune or torchtitan log.
    Returns a Result (the tool's JSON). A pickle or dict is handed to the tool through a temporary
    JSON file, which the result's command names."""
    if snapshot is None:
        return _run(**options)
    if not isinstance(snapshot, (dict, str, bytes, os.PathLike)):
        raise TypeError(f"snapshot= takes a path or the snapshot's dict, not "
                        f"{type(snapshot).__name__}")
    text = _snapshot_json(snapshot)
    if text is None:
        return _run(snapshot=snapshot, **options)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "snapshot.json")
        with io.open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return _run(snapshot=path, **options)


compare.__doc__ += "\n\n" + _run.__doc__.split("\n\n", 1)[1]
