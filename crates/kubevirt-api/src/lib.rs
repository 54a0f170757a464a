//! kubevirt.io/v1 resources: what they are called, their schemas, defaults and admission rules.
