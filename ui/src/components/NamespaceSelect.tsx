// The namespace scope of a list page: a select when namespaces can be listed, a text
// field when they cannot.
import { FormSelect, FormSelectOption, TextInput } from '@patternfly/react-core';
import { useEffect, useState } from 'react';
import { paths } from '../api/paths';
import type { Namespace } from '../api/types';
import { useList } from '../state/informers';
import { ALL_NAMESPACES, useNamespace } from '../state/namespace';

export function NamespaceSelect() {
  const { namespace, setNamespace, clusterWideDenied } = useNamespace();
  const nsList = useList<Namespace>(paths.namespaces());
  const [draft, setDraft] = useState(namespace);
  useEffect(() => setDraft(namespace), [namespace]);

  if (nsList.fatal) {
    return (
      <TextInput
        aria-label="Namespace"
        value={draft}
        placeholder="default"
        onChange={(_e, v) => setDraft(v)}
        onBlur={() => setNamespace(draft.trim())}
        onKeyDown={(e) => {
          if (e.key === 'Enter') setNamespace(draft.trim());
        }}
      />
    );
  }
  const names = [...nsList.items.values()].map((n) => n.metadata.name ?? '').sort();
  if (namespace && !names.includes(namespace)) names.unshift(namespace);
  return (
    <FormSelect aria-label="Namespace" value={namespace} onChange={(_e, v) => setNamespace(v)}>
      {!clusterWideDenied && <FormSelectOption value={ALL_NAMESPACES} label="All namespaces" />}
      {names.map((n) => (
        <FormSelectOption key={n} value={n} label={n} />
      ))}
    </FormSelect>
  );
}
