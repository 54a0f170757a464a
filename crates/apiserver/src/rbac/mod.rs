//! The RBAC kinds as the API server serves them (`kinds`), and the bootstrap policy
//! (`access::rbac::bootstrap`) written into the store at every start.

pub mod kinds;

use access::rbac::bootstrap::{cluster_role_bindings, cluster_roles, reconciled};
use access::rbac::GROUP;
use apimachinery::status::Status;

use crate::registry::{Change, Registry, WriteOptions};

/// Creates or reconciles every bootstrap role and binding.
pub async fn ensure(registry: &Registry) -> Result<(), (String, Status)> {
    let options = WriteOptions {
        field_manager: "virtplane".into(),
        ..Default::default()
    };
    let kinds = [
        ("clusterroles", cluster_roles()),
        ("clusterrolebindings", cluster_role_bindings()),
    ];
    for (plural, objects) in kinds {
        let Some(reg) = registry.find(GROUP, "v1", plural) else {
            continue;
        };
        for wanted in objects {
            let name = crate::object::name(&wanted).to_string();
            let failed = |status: Status| (format!("{plural}/{name}"), status);
            match registry.get(&reg, None, &name).await {
                Ok(existing) => {
                    if reconciled(&existing, &wanted).is_none() {
                        continue;
                    }
                    registry
                        .update_with(&reg, None, &name, None, &options, |current| {
                            Ok(Change::replace(
                                reconciled(current, &wanted).unwrap_or_else(|| current.clone()),
                            ))
                        })
                        .await
                        .map_err(failed)?;
                }
                Err(status) if status.code == 404 => {
                    match registry.create(&reg, None, wanted.clone(), &options).await {
                        Ok(_) => {}
                        Err(status) if status.code == 409 => {}
                        Err(status) => return Err(failed(status)),
                    }
                }
                Err(status) => return Err(failed(status)),
            }
        }
    }
    Ok(())
}
