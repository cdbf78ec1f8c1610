// Empty stand-in: clang's CUDA wrapper includes this curand header, which the nvcc wheels do not ship.
// Used only by the parse in split.py, never by a compiler.
