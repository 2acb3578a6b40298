-- With the JIT engine off the count hook fires, even without a sandbox.
jit.off()
while true do end
