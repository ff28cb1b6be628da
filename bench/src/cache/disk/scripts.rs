//! The wrk scripts of `cache-disk`: each request for one of `count` objects of one size, named
//! `/object/SIZE/PREFIXN` (N from 1), drawn uniformly (the hot and the cold loads) or by a Zipf
//! popularity (the upgrade's load: object N asked for in proportion to 1/N^exponent, by inverse
//! transform over the cumulative weights, as `cache-replay` draws its trace), and then paced: each
//! connection waits a while after each answer, so that the load is steady at a rate of its own
//! rather than as fast as the machine goes (a cache started empty would otherwise fill within a
//! second). The kit runs wrk with one thread; its script is seeded by the clock, so no two runs ask
//! in the same order.
//!
//! Every request says `Host: 127.0.0.1`, as the objects were stored by the benchmark's own client
//! (wrk would add the port, and the host is part of the cache's key).

use std::fmt::Write as _;

/// The objects a load asks for: `/object/{size}/{prefix}N` for N in 1..=count.
#[derive(Debug, Clone, PartialEq)]
pub struct Objects {
    pub size: usize,
    pub prefix: &'static str,
    pub count: u32,
}

impl Objects {
    /// What every one of its paths starts with (for the origin's count).
    pub fn path_prefix(&self) -> String {
        format!("/object/{}/{}", self.size, self.prefix)
    }

    /// The path of object `n` (from 1).
    pub fn path(&self, n: u32) -> String {
        format!("{}{n}", self.path_prefix())
    }

    /// A script asking for every object alike.
    pub fn uniform_script(&self) -> String {
        let mut lua = self.head();
        let _ = writeln!(
            lua,
            "request = function()\n  \
             return wrk.format(\"GET\", prefix .. math.random(count))\nend"
        );
        lua
    }

    /// A script asking for object N with weight 1/N^`exponent`, each connection waiting
    /// `pause_ms` after each answer.
    pub fn zipf_script(&self, exponent: f64, pause_ms: u32) -> String {
        let mut lua = self.head();
        let _ = writeln!(lua, "delay = function()\n  return {pause_ms}\nend");
        let _ = writeln!(
            lua,
            "local cumulative, total = {{}}, 0\n\
             for rank = 1, count do\n  \
               total = total + rank ^ (-{exponent})\n  \
               cumulative[rank] = total\n\
             end\n\
             request = function()\n  \
               local point = math.random() * total\n  \
               local low, high = 1, count\n  \
               while low < high do\n    \
                 local middle = math.floor((low + high) / 2)\n    \
                 if cumulative[middle] < point then low = middle + 1 else high = middle end\n  \
               end\n  \
               return wrk.format(\"GET\", prefix .. low)\n\
             end"
        );
        lua
    }

    /// The objects, and the seed.
    fn head(&self) -> String {
        format!(
            "local prefix, count = \"{}\", {}\nmath.randomseed(os.time())\n\
             wrk.headers[\"Host\"] = \"127.0.0.1\"\n",
            self.path_prefix(),
            self.count
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_names_its_objects_and_draws_them() {
        let cold = Objects {
            size: 32768,
            prefix: "cold-",
            count: 600,
        };
        assert_eq!(cold.path(7), "/object/32768/cold-7");
        let uniform = cold.uniform_script();
        assert!(uniform.starts_with("local prefix, count = \"/object/32768/cold-\", 600\n"));
        assert!(
            uniform.contains("prefix .. math.random(count)"),
            "{uniform}"
        );
        assert!(uniform.contains("wrk.headers[\"Host\"] = \"127.0.0.1\"\n"));
        assert!(!uniform.contains("delay"));
        let zipf = cold.zipf_script(1.0, 25);
        assert!(
            zipf.contains("delay = function()\n  return 25\nend"),
            "{zipf}"
        );
        assert!(zipf.contains("total = total + rank ^ (-1)"), "{zipf}");
        assert!(
            zipf.contains("return wrk.format(\"GET\", prefix .. low)"),
            "{zipf}"
        );
    }
}
