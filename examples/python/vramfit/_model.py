"""Models as --model takes them (a preset, a config.json path, a config's text), and the
tool's preset lists."""

import functools
import json
import os
from collections.abc import Mapping

from ._cli import Error, run_or_raise


class Model:
    """A model for model=: a preset's key or name, a config.json (or its folder), or a Hugging
    Face config given as a dict. `argument` is what the tool's --model receives."""

    def __init__(self, argument, described=None):
        if not isinstance(argument, (str, bytes, os.PathLike)):
            raise TypeError(f"Model() takes a preset, a config.json path or its folder (a dict: "
                            f"Model.from_hf_config), not {type(argument).__name__}")
        self.argument = os.fsdecode(argument)  # bytes as os.fsdecode's str: the same bytes again
        if described is not None:
            self.__dict__["described"] = described

    @classmethod
    def from_hf_config(cls, config, name=None):
        """A model from a config.json's dict (or an object with to_dict(), as transformers'
        PretrainedConfig), or from its path. A dict's model is named `name`, else by its
        _name_or_path, else its model_type; a file's by its name or folder's, as the tool does.
        Raises Error, with the tool's message, for a config it cannot read."""
        if hasattr(config, "to_dict"):
            config = config.to_dict()
        if isinstance(config, Mapping):
            config = dict(config)
            if name is not None:
                config["_name_or_path"] = str(name)
            try:
                text = json.dumps(config, allow_nan=False)
            except (TypeError, ValueError, RecursionError) as e:  # not JSON: a set, NaN, a cycle
                what = "nests too deep" if isinstance(e, RecursionError) else str(e)
                raise (TypeError if isinstance(e, TypeError) else ValueError)(
                    f"from_hf_config(): the config is not JSON: {what}") from None
            model = cls(text)
        elif name is not None:
            raise TypeError("name= names a dict's model; a file is named after itself")
        else:
            model = cls(config)
        model.described  # read it now, so that a bad config fails here
        return model

    @functools.cached_property
    def described(self):
        """The tool's "model" entry: name, parameters, trainable_parameters (from infer)."""
        given = ["--model", ""] if self.argument == "" else [f"--model={self.argument}"]
        run = run_or_raise(["infer", *given, "--format=json"])
        return json.loads(run.out)["model"]

    @property
    def name(self):
        return self.described["name"]

    @property
    def parameters(self):
        return self.described["parameters"]

    def __repr__(self):
        try:
            shown = self.name
        except Error:  # a repr never raises: a model the tool refuses shows as given
            shown = self.argument
        return f"vramfit.Model({shown!r})"


def _listing(subcommand):
    return json.loads(run_or_raise([subcommand, "--format=json"]).out)


def models():
    """The model presets (`vramfit models`), as Models; each also has `key` and
    `active_parameters`."""
    listed = []
    for row in _listing("models"):
        model = Model(row["key"], row)
        model.key, model.active_parameters = row["key"], row["active_parameters"]
        listed.append(model)
    return listed


def gpus():
    """The GPU presets (`vramfit gpus`): dicts of key, name, capacity (bytes) and source."""
    return _listing("gpus")


def frameworks():
    """The --framework presets (`vramfit frameworks`): the defaults each sets, with sources."""
    return _listing("frameworks")
