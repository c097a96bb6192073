//! Token files: hashes at rest, roles, rotation, and each malformed line named.

use inpath_net::tokens::{self, read_token_file, with_entry, Role, Tokens};
use inpath_net::NetError;
use std::path::Path;

#[test]
fn tokens_are_checked_by_hash_with_their_role() {
    let a = tokens::generate().unwrap();
    let b = tokens::generate().unwrap();
    assert!(a.starts_with("inpath_") && a.len() == 7 + 64 && a != b);
    let text = with_entry(
        &with_entry("", "alice", Role::Write, &a),
        "ci",
        Role::Read,
        &b,
    );
    assert!(
        !text.contains(&a[7..]) && !text.contains(&b[7..]),
        "a token is stored: {text}"
    );
    let t = Tokens::parse(&text, Path::new("t")).unwrap();
    assert_eq!(t.len(), 2);
    let g = t.check(&a).unwrap();
    assert_eq!((g.name.as_str(), g.role), ("alice", Role::Write));
    assert_eq!(t.check(&b).unwrap().role, Role::Read);
    assert!(t.check("inpath_0000").is_none() && t.check("").is_none());
    assert!(Role::Write.allows(Role::Read) && !Role::Read.allows(Role::Write));
    // Rotation: the name's line is replaced, the old token stops working.
    let c = tokens::generate().unwrap();
    let t = Tokens::parse(&with_entry(&text, "alice", Role::Read, &c), Path::new("t")).unwrap();
    assert!(t.check(&a).is_none());
    assert_eq!(t.check(&c).unwrap().role, Role::Read);
    assert_eq!(t.len(), 2);
}

#[test]
fn malformed_lines_are_named() {
    let good = tokens::entry_line("x", Role::Read, "inpath_x");
    let cases: [(String, &str); 6] = [
        ("alice write".into(), "three fields"),
        (format!("al ice {}", &good[2..]), "three fields"),
        (good.replace("read", "admin"), "read (kernels and reads)"),
        ("x read sha256:12".into(), "64 hexadecimal digits"),
        ("x read plain-token".into(), "64 hexadecimal digits"),
        (
            format!("{good}\n{}", good.replace("x ", "y ")),
            "hash is given twice",
        ),
    ];
    for (text, needle) in cases {
        let err = Tokens::parse(&format!("# c\n\n{text}\n"), Path::new("tok")).unwrap_err();
        assert!(
            matches!(
                err,
                NetError::Entry { line: 3, .. } | NetError::Entry { line: 4, .. }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(needle), "{text:?}: {err}");
        assert!(err.to_string().contains("tok"), "{err}");
    }
    let twice = format!(
        "{good}\n{}",
        tokens::entry_line("x", Role::Write, "inpath_y")
    );
    let err = Tokens::parse(&twice, Path::new("t")).unwrap_err();
    assert!(err.to_string().contains("given twice"), "{err}");
}

#[cfg(unix)]
#[test]
fn token_files_others_could_change_and_client_tokens_others_could_read_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let d = inpath_testkit::dir::scratch("inpath-net-tokens");
    let token = tokens::generate().unwrap();
    let path = inpath_testkit::dir::write(
        d.path(),
        "tokens",
        with_entry("", "a", Role::Read, &token).as_bytes(),
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
    let err = Tokens::load(&path).unwrap_err();
    assert!(matches!(err, NetError::Mode { .. }), "{err}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(Tokens::load(&path).unwrap().len(), 1);

    let mine =
        inpath_testkit::dir::write(d.path(), "mine", format!("# mine\n{token}\n").as_bytes());
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(read_token_file(&mine)
        .unwrap_err()
        .to_string()
        .contains("chmod 600"));
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(read_token_file(&mine).unwrap(), token);
}
