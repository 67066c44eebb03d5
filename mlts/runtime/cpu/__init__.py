"""The CPU executor (AOSP's CpuExecutor): runs a HAL model over the operation registry's kernels. Drivers
built on the shared kernels (nnapi-reference, the sample drivers, the fault injectors) use it."""
