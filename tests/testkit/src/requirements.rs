//! Random job Requirements for the matchmaking oracles: the same seed gives
//! the same jobs on every run, so a failure names a job that can be replayed.

/// A 64-bit linear congruential generator (Knuth's MMIX constants): small,
/// deterministic, and enough to spread test cases.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 31 bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// A number below `n` (> 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.bits() % n as u64) as usize
    }

    /// An element of `v` (not empty).
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// A Requirements expression of 1 to 4 conjuncts over `attrs` (an offer
/// attribute and values at and beside the ones published): comparisons with
/// every operator, in either order, through `other.`, `TARGET.` or no
/// scope; `Member` over the RTE list, `isUndefined`, bare attributes, and
/// conjuncts under `||` and `!`.
pub fn random_requirements(rng: &mut Lcg, attrs: &[(&str, &[&str])]) -> String {
    let ops = ["==", "!=", "<", "<=", ">", ">=", "=?=", "=!="];
    let scopes = ["other.", "TARGET.", ""];
    let atom = |rng: &mut Lcg| -> String {
        match rng.below(12) {
            0 => format!(
                "Member({}, other.GlueHostApplicationSoftwareRunTimeEnvironment)",
                rng.pick(&["\"NvidiaGPGPU\"", "\"nvidiagpgpu\"", "\"AMDGPGPU\"", "\"rCUDA\"", "1"])
            ),
            1 => format!("isUndefined(other.{})", rng.pick(attrs).0),
            2 => format!("other.{}", rng.pick(&["GPGPUECCSupport", "GPGPUFreeInstances", "GPGPUVendor"])),
            _ => {
                let (a, vals) = rng.pick(attrs);
                let (s, op, v) = (rng.pick(&scopes), rng.pick(&ops), rng.pick(vals));
                if rng.below(4) == 0 {
                    format!("{v} {op} {s}{a}")
                } else {
                    format!("{s}{a} {op} {v}")
                }
            }
        }
    };
    let n = 1 + rng.below(4);
    let mut clauses = Vec::new();
    for _ in 0..n {
        clauses.push(match rng.below(8) {
            0 => format!("({} || {})", atom(rng), atom(rng)),
            1 => format!("!({})", atom(rng)),
            _ => atom(rng),
        });
    }
    clauses.join(" && ")
}
