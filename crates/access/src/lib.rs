//! Who may do what, decided apart from how requests arrive: authentication (bearer
//! tokens, client certificates), RBAC objects with kube's bootstrap policy, authorization
//! decisions with kube's reasons, impersonation, the audit policy, and the cluster PKI
//! that issues the certificates. The API server feeds it (RBAC objects from its store)
//! and asks it; nothing here serves HTTP or touches the store.

pub mod audit;
pub mod authn;
pub mod authz;
pub mod pki;
pub mod rbac;
