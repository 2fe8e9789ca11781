"""The MUSE-WM acting agent (paper 000 §3, Algorithm 1): the agent, its acting config and the
checkpoint loading it needs. Training (metacog_fast.metaworld.train) builds on this package, never the
other way round."""
from metacog_fast.metaworld.muse_wm.agent import MuseWMAgent, NumpyEncoder
from metacog_fast.metaworld.muse_wm.checkpoint import ActingCheckpoint, load_acting_weights
from metacog_fast.metaworld.muse_wm.config import ActConfig

__all__ = ["ActConfig", "ActingCheckpoint", "MuseWMAgent", "NumpyEncoder", "load_acting_weights"]
