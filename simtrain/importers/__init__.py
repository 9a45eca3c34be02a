"""Training jobs of other frameworks as simtrain settings: a torchtitan job TOML
(:func:`from_torchtitan`) or a Megatron-LM launch (:func:`from_megatron`), each an
:class:`Imported` job: the settings, and the job's keys that have no effect on one step. Keys that
change the step in a way simtrain does not model are named in one error."""

from simtrain.importers.job import Imported
from simtrain.importers.megatron import from_megatron
from simtrain.importers.torchtitan import from_torchtitan

__all__ = ["Imported", "from_megatron", "from_torchtitan"]
