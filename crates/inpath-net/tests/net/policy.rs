//! The listener policy: loopback is free; anything else needs TLS and authentication or the
//! user's explicit flag, which yields a warning to print.

use inpath_net::policy::{check, is_loopback, loopback_unless_told};
use inpath_net::{NetError, Protection};

const BOTH: Protection = Protection {
    tls: true,
    auth: true,
};

#[test]
fn only_loopback_listens_unprotected() {
    for ok in ["127.0.0.1:7420", "[::1]:7420", "localhost:0", "127.1.2.3:9"] {
        assert_eq!(
            check(
                "store serve",
                ok,
                Protection::default(),
                false,
                "--insecure-no-auth"
            )
            .unwrap(),
            None,
            "{ok}"
        );
    }
    assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
    assert!(!is_loopback("0.0.0.0".parse().unwrap()));
    let err = check(
        "store serve",
        "0.0.0.0:7420",
        Protection::default(),
        false,
        "--insecure-no-auth",
    )
    .unwrap_err();
    assert!(matches!(err, NetError::Policy { .. }));
    let text = err.to_string();
    for needle in [
        "0.0.0.0:7420",
        "every network interface",
        "without TLS or authentication",
        "--insecure-no-auth",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let tls_only = Protection {
        tls: true,
        auth: false,
    };
    let err = check(
        "store serve",
        "0.0.0.0:1",
        tls_only,
        false,
        "--insecure-no-auth",
    )
    .unwrap_err();
    assert!(err.to_string().contains("without authentication"), "{err}");
    let auth_only = Protection {
        tls: false,
        auth: true,
    };
    let err = check("store serve", "0.0.0.0:1", auth_only, false, "-x").unwrap_err();
    assert!(err.to_string().contains("in the clear"), "{err}");
    assert_eq!(
        check("store serve", "0.0.0.0:1", BOTH, false, "-x").unwrap(),
        None
    );
    let warning = check(
        "cache serve",
        "[::]:11211",
        Protection::default(),
        true,
        "--insecure-no-auth",
    )
    .unwrap()
    .unwrap();
    assert!(
        warning.contains("warning: inpath cache serve listens on [::]:11211"),
        "{warning}"
    );
    let err = check("x", "no-port", BOTH, false, "-x").unwrap_err();
    assert!(matches!(err, NetError::Address { .. }), "{err}");
}

#[test]
fn a_port_alone_means_loopback() {
    assert_eq!(loopback_unless_told("7421"), "127.0.0.1:7421");
    assert_eq!(loopback_unless_told("0.0.0.0:7421"), "0.0.0.0:7421");
    assert_eq!(loopback_unless_told("[::1]:1"), "[::1]:1");
}
