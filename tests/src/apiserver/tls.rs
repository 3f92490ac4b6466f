//! The double's TLS: a throw-away CA and a serving certificate it signs, made with rcgen at
//! start, valid for `127.0.0.1`, `::1`, `localhost` and the in-cluster service names, like
//! the certificate kubeadm gives an API server.

use std::io;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The CA (for clients) and the server side configuration.
#[derive(Debug)]
pub(crate) struct TlsMaterial {
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

pub(crate) fn generate() -> io::Result<TlsMaterial> {
    let ca_key = KeyPair::generate().map_err(io_err)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(io_err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "nodemedic-test-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(io_err)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let names = [
        "127.0.0.1",
        "::1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ];
    let mut params = CertificateParams::new(names.map(String::from).to_vec()).map_err(io_err)?;
    params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let key = KeyPair::generate().map_err(io_err)?;
    let cert = params.signed_by(&key, &issuer).map_err(io_err)?;

    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io_err)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(io_err)?;
    // HTTP/1.1 only: clients that offer h2 fall back to it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        server_config: Arc::new(config),
    })
}
