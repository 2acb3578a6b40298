# Independent reference for tests/data/rng_test.cpp: splitmix64 and the
# per-epoch Fisher-Yates permutation of src/data/rng.cpp, in Python integers.
# Run: /usr/bin/python3 tests/data/permutation_reference.py
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, bound):
        threshold = ((1 << 64) - bound) % bound
        while True:
            value = self.next()
            if value >= threshold:
                return value % bound


def epoch_permutation(n, seed, epoch):
    seed_mix = SplitMix64(seed).next()
    epoch_mix = SplitMix64((epoch & MASK) ^ 0xD1B54A32D192ED03).next()
    rng = SplitMix64(seed_mix ^ epoch_mix)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


if __name__ == "__main__":
    rng = SplitMix64(1234567)
    print("splitmix64(1234567):", [rng.next() for _ in range(5)])
    for n, seed, epoch in [(10, 42, 0), (10, 42, 1), (12, 7, 3), (5, -1 & MASK, 2)]:
        print(n, seed, epoch, epoch_permutation(n, seed, epoch))
