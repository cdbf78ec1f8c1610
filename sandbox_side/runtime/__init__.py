"""A runner's process inside its sandbox: the module loaded, the pipe and its typed messages, tensors over it."""
