//! The SSH keys' rules, tried: parsing, references, adding, registration and retirement.

use super::*;

// Made with `ssh-keygen` (fingerprints as `ssh-keygen -lf` prints them); the security-key
// one built by hand from its wire form (string type, string key, string application).
const ED25519: &str = "ssh-ed25519 \
    AAAAC3NzaC1lZDI1NTE5AAAAIEUwtq0dnKZIwio9dsNtAZXA6XuOXMlBmgWGp1VGJOQf agent@example";
const P256: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAAB\
    BBHrPgq7g6H3fVylRKAUv/crHipmHwwgKhZtjf6RxumfjpqM5r9IhSihipJhzh8gCZSOVzBTy3wfEjOBUVXONm4w\
    = p256";
const RSA2048: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCl/v22Ja5f7f1g3Bnt5tn99hSyzAbYUC\
    yZbNMrJTh9xeJONGnpjwm2scF/uUo/8z52Jt8ih0hSLlMX60VTOyZE+gE19Sao5a48xELp7Z2f2UpKrKGnhBzwsap\
    4MdOibosDa70dAK16ZxKhOiKRX8glT55zf6G+Pra/ovkRofGTUSMlxVBzJ7s5nYxwwTwU7LOShnbq/Bhz69Q//QuH0\
    Fue9gRz8aCAyDPfCRuPHt8r9K5Ea4io6mivUC/73nKicKsbugS7GFx0hZKTIGNEfgakywuPI/usDzeJEBs2btRV+tw\
    twjF+7fgoGHwmR7kCCtzpAFFQBwAP+RM2Sv/lqM+h rsa2048";
const RSA1024: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDfgRn2pqwbi9/fmMUoM1w6oa0opCryyk\
    NSs4iogxdLggfgBA5zkZFxvV/gmJdNw2Ol2u1TLEKfcPRVOhVr8KIR9RZZrERn/n8jjzjuJ/MtUMLYKmorBU7Yp+xf\
    E5Rg9shJj/ekpLFNaJ5g+1r2OJIjDEC0Oj8nj9fQFAWyby6xLw== rsa1024";
const SK_ED25519: &str = "sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t\
    AAAAIAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gAAAABHNzaDo= yubikey";
const DSA: &str = "ssh-dss AAAAB3NzaC1kc3MAAACBAIYWHPQIQXMPpgyDOjzIV2oA4yd8kvllzD0VEq9yVgK4rk \
    dsa";

fn refusal(text: &str) -> String {
    match parse_public_key("publicKey", text).unwrap_err() {
        ApiError::Invalid { field, message } => {
            assert_eq!(field, "publicKey");
            message
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_taken_algorithms_parse_with_ssh_keygens_fingerprints() {
    for (text, algorithm, fingerprint) in [
        (
            ED25519,
            "ssh-ed25519",
            "SHA256:JL3qZRNMh3ZPpkTNPx0BInntLV6eI9R6VjLyyC8S04w",
        ),
        (
            P256,
            "ecdsa-sha2-nistp256",
            "SHA256:7TA3jhydKqrabL0VopxJezv47pD7DDQc+DTtbCzJJfw",
        ),
        (
            RSA2048,
            "ssh-rsa",
            "SHA256:1nj69dV2Ad688sZpan0WXP1eDZ5zfwEbFheyKzMRZr4",
        ),
        (
            SK_ED25519,
            "sk-ssh-ed25519@openssh.com",
            "SHA256:nX0hpi5mKbTIJ10yBq5/sLQhiI1Y0RBAqN0drDdgJWs",
        ),
    ] {
        let parsed = parse_public_key("publicKey", &format!("  {text}\n")).unwrap();
        assert_eq!(parsed.algorithm, algorithm);
        assert_eq!(parsed.fingerprint, fingerprint);
        // Kept without its comment, which becomes the default name.
        let comment = text.rsplit(' ').next().unwrap();
        assert_eq!(parsed.comment, comment);
        assert_eq!(parsed.text, text.trim_end_matches(comment).trim());
        assert_eq!(default_name(&parsed), comment);
    }
}

#[test]
fn each_refusal_says_why() {
    assert!(refusal("").contains("empty"));
    assert!(refusal("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r\n").contains("private"));
    assert!(refusal(&format!("{ED25519}\n{P256}")).contains("2 lines"));
    assert!(refusal(&format!("from=\"10.0.0.1\" {ED25519}")).contains("options"));
    assert!(refusal(&format!("command=\"ls\",no-pty {ED25519}")).contains("options"));
    assert!(refusal(DSA).contains("`ssh-dss` is not taken"));
    assert!(refusal(RSA1024).contains("1024 bits"));
    assert!(refusal("ssh-ed25519 AAAA!!notbase64").contains("well-formed"));
    // The algorithm named must be the key's.
    let swapped = ED25519.replacen("ssh-ed25519", "ssh-rsa", 1);
    assert!(refusal(&swapped).contains("well-formed"));
    assert!(refusal(&"A".repeat(MAX_KEY_BYTES + 1)).contains("longer"));
}

#[test]
fn entries_are_ids_provider_ids_or_keys() {
    let id = format!("{SSH_KEY}{}", "a".repeat(32));
    let refs = key_refs(
        "sshKeys",
        &[
            Value::from(id.clone()),
            Value::from(9845),
            Value::from("9846"),
            Value::from(ED25519),
        ],
    )
    .unwrap();
    assert_eq!(refs[0], KeyRef::Id(id));
    assert_eq!(refs[1], KeyRef::Provider(9845));
    assert_eq!(refs[2], KeyRef::Provider(9846));
    assert!(matches!(&refs[3], KeyRef::Raw(k) if k.algorithm == "ssh-ed25519"));
    let field = |values: &[Value]| match key_refs("sshKeys", values).unwrap_err() {
        ApiError::Invalid { field, .. } => field,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        field(&[Value::from(ED25519), Value::from("ssh_x")]),
        "sshKeys[1]"
    );
    assert_eq!(field(&[Value::from(true)]), "sshKeys[0]");
    assert_eq!(field(&[Value::from(RSA1024)]), "sshKeys[0]");
    assert_eq!(field(&vec![Value::from(1); MAX_PER_SERVER + 1]), "sshKeys");
}

#[test]
fn one_owner_holds_a_key_once() {
    let owner = |n: &str| crate::address::Owner::parse(&format!("0x{}", n.repeat(40))).unwrap();
    let fingerprint = "SHA256:JL3qZRNMh3ZPpkTNPx0BInntLV6eI9R6VjLyyC8S04w";
    assert_eq!(
        key_id(&owner("1"), fingerprint),
        key_id(&owner("1"), fingerprint)
    );
    assert_ne!(
        key_id(&owner("1"), fingerprint),
        key_id(&owner("2"), fingerprint)
    );
    assert!(crate::ids::parse(SSH_KEY, "id", &key_id(&owner("1"), fingerprint)).is_ok());
}
