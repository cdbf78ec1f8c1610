"""The bundled problem library: KernelBench-format references with honest and subtly wrong
Triton and CUDA candidates, one folder per problem (`catalog.py` reads them).

Reading the library never imports torch: the client-side CLI lists, shows, registers and exports
problems without the worker's dependencies.
"""
