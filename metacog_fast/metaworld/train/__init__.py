"""Training of the MUSE-WM / Dreamer-v3 agents on Meta-World: replay, configs and profiles,
checkpoints, the resumable protocol runner, reports and CLI entry points."""
