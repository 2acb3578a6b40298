-- Only loads with sandbox = false: ffi.C, os.getenv and the JIT.
local ffi = require("ffi")
ffi.cdef("int getpid(void);")
assert(ffi.C.getpid() > 0, "ffi.C.getpid failed")
assert(os.getenv("PATH"), "os.getenv gave nothing")
assert(jit.status(), "the JIT should stay on without a sandbox")

function reward()
  return 1
end
