"""An L1 penalty on each task's change as a jumplora method plugin with a setting of its own (see `method`)."""
