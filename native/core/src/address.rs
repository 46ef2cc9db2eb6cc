//! The parts of a rank's "host:port" address.

/// The host part of a "host:port" address.
pub(crate) fn host(address: &str) -> &str {
    address.rsplit_once(':').map_or(address, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_host_keeps_its_colons() {
        assert_eq!(host("[::1]:80"), "[::1]");
        assert_eq!(host("10.0.0.1:4000"), "10.0.0.1");
    }
}
