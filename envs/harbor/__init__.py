"""Harbor-format tasks (task.toml, instruction.md, environment/, tests/, solution/) as an
environment scored by each task's own tests, run in our sandbox. See docs/harbor.md."""
