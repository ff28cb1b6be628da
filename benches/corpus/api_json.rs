// The API-like JSON document of the compression corpus (4,000 objects with the same keys, varied
// values, 592 KiB): `include!`d by benches/compression_levels.rs, which chose the levels on it,
// and by `herdsman-bench rules`, which measures the proxies compressing it.

/// An API answer: a list of objects with the same keys, varied values.
pub fn json_document() -> Vec<u8> {
    let mut out = String::from("{\"items\":[");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..4000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            "{{\"id\":{i},\"name\":\"server-{}\",\"address\":\"10.{}.{}.{}:8080\",\"state\":\"{}\",\
             \"weight\":{},\"requests\":{},\"latency_ms\":{:.3},\"tags\":[\"{}\",\"zone-{}\"]}}",
            seed % 977,
            seed % 256,
            (seed >> 8) % 256,
            (seed >> 16) % 256,
            ["ready", "drain", "down"][(seed % 3) as usize],
            seed % 10,
            seed % 1_000_000,
            (seed % 100_000) as f64 / 997.0,
            ["web", "api", "batch", "cache"][(seed >> 3) as usize % 4],
            seed % 7
        ));
    }
    out.push_str("]}");
    out.into_bytes()
}
