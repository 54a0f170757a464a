// The create form: fields on the left, the VirtualMachine they make as YAML beside them.
import {
  ActionGroup,
  Button,
  Checkbox,
  CodeBlock,
  CodeBlockCode,
  Form,
  FormGroup,
  FormHelperText,
  FormSelect,
  FormSelectOption,
  Grid,
  GridItem,
  HelperText,
  HelperTextItem,
  PageSection,
  TextArea,
  TextInput,
  Title,
} from '@patternfly/react-core';
import { cloneElement, useMemo, useState, type ReactElement, type ReactNode } from 'react';
import { api } from '../api/client';
import { paths } from '../api/paths';
import { can } from '../api/ssar';
import { ApiError } from '../api/status';
import type { VirtualMachine } from '../api/types';
import { href, navigate } from '../app/router';
import { ErrorAlert } from '../components/ErrorAlert';
import { GatedButton } from '../components/GatedButton';
import { useNamespace } from '../state/namespace';
import { FALLBACK_NAMESPACE } from '../state/scoped';
import { BOOT_SOURCES, buildVm, defaultForm, NETWORKS, toYaml, validateForm, type BootSource, type VmForm } from './manifest';

/** Maps a server cause's field path to the form field it is about. */
function fieldOfCause(field: string | undefined): keyof VmForm | null {
  if (!field) return null;
  if (/metadata\.name$/.test(field)) return 'name';
  if (/metadata\.namespace$/.test(field)) return 'namespace';
  if (/cpu\.cores/.test(field)) return 'cpuCores';
  if (/memory/.test(field)) return 'memory';
  if (/containerDisk/.test(field)) return 'containerDiskImage';
  if (/http\.url|source/.test(field)) return 'imageUrl';
  if (/storage/.test(field)) return 'diskSize';
  if (/claimName/.test(field)) return 'claimName';
  if (/userData|cloudInit/.test(field)) return 'sshKey';
  return null;
}

export function CreateVmPage({ initialNamespace }: { initialNamespace?: string }) {
  const { namespace } = useNamespace();
  const [form, setForm] = useState<VmForm>(() => defaultForm(initialNamespace || namespace || FALLBACK_NAMESPACE));
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  const vm = useMemo(() => buildVm(form), [form]);
  const yaml = useMemo(() => toYaml(vm), [vm]);
  const errors = validateForm(form);
  const serverErrors = useMemo(() => {
    const out: Partial<Record<keyof VmForm, string>> = {};
    if (error instanceof ApiError)
      for (const c of error.causes) {
        const f = fieldOfCause(c.field);
        if (f) out[f] = `${c.field}: ${c.message ?? ''}`;
      }
    return out;
  }, [error]);

  const set = <K extends keyof VmForm>(k: K, v: VmForm[K]) => setForm((f) => ({ ...f, [k]: v }));

  const submit = async () => {
    setTouched(true);
    if (Object.keys(errors).length > 0 || busy) return;
    setBusy(true);
    setError(null);
    try {
      const created = await api.post<VirtualMachine>(paths.vms(vm.metadata.namespace), vm);
      navigate(href.vm(created?.metadata?.namespace ?? vm.metadata.namespace ?? '', created?.metadata?.name ?? vm.metadata.name ?? ''));
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  };

  const field = (
    key: keyof VmForm,
    label: string,
    input: ReactElement,
    opts: { required?: boolean; help?: ReactNode } = {},
  ) => {
    const err = (touched && errors[key]) || serverErrors[key];
    return (
      <FormGroup label={label} fieldId={`vm-${key}`}>
        {/* aria-required rather than PF's asterisk, so the label reads exactly `label`. */}
        {opts.required ? cloneElement(input, { 'aria-required': true }) : input}
        {err || opts.help ? (
          <FormHelperText>
            <HelperText>
              <HelperTextItem variant={err ? 'error' : 'default'}>{err || opts.help}</HelperTextItem>
            </HelperText>
          </FormHelperText>
        ) : null}
      </FormGroup>
    );
  };
  const v = (key: keyof VmForm) => ((touched && errors[key]) || serverErrors[key] ? 'error' : 'default');

  const needsSize = form.bootSource === 'url' || form.bootSource === 'blank';

  return (
    <>
      <PageSection>
        <Title headingLevel="h1">Create VirtualMachine</Title>
      </PageSection>
      <PageSection>
        <Grid hasGutter>
          <GridItem md={6}>
            <Form
              onSubmit={(e) => {
                e.preventDefault();
                void submit();
              }}
            >
              {field(
                'name',
                'Name',
                <TextInput id="vm-name" value={form.name} validated={v('name')} onChange={(_e, x) => set('name', x)} />,
                { required: true },
              )}
              {field(
                'namespace',
                'Namespace',
                <TextInput id="vm-namespace" value={form.namespace} validated={v('namespace')} onChange={(_e, x) => set('namespace', x)} />,
                { required: true },
              )}
              {field(
                'cpuCores',
                'CPU cores',
                <TextInput
                  id="vm-cpuCores"
                  type="number"
                  min={1}
                  value={Number.isNaN(form.cpuCores) ? '' : String(form.cpuCores)}
                  validated={v('cpuCores')}
                  onChange={(_e, x) => set('cpuCores', x === '' ? NaN : Number(x))}
                />,
                { required: true },
              )}
              {field(
                'memory',
                'Memory',
                <TextInput id="vm-memory" value={form.memory} validated={v('memory')} onChange={(_e, x) => set('memory', x)} />,
                { required: true, help: 'Guest memory, e.g. 256Mi or 2Gi.' },
              )}
              {field(
                'bootSource',
                'Boot source',
                <FormSelect id="vm-bootSource" value={form.bootSource} onChange={(_e, x) => set('bootSource', x as BootSource)}>
                  {BOOT_SOURCES.map((b) => (
                    <FormSelectOption key={b.value} value={b.value} label={b.label} />
                  ))}
                </FormSelect>,
              )}
              {form.bootSource === 'containerDisk' &&
                field(
                  'containerDiskImage',
                  'Container disk image',
                  <TextInput
                    id="vm-containerDiskImage"
                    value={form.containerDiskImage}
                    placeholder="quay.io/kubevirt/cirros-container-disk-demo"
                    validated={v('containerDiskImage')}
                    onChange={(_e, x) => set('containerDiskImage', x)}
                  />,
                  { required: true },
                )}
              {form.bootSource === 'url' &&
                field(
                  'imageUrl',
                  'Image URL',
                  <TextInput
                    id="vm-imageUrl"
                    type="url"
                    value={form.imageUrl}
                    placeholder="https://example.com/disk.qcow2"
                    validated={v('imageUrl')}
                    onChange={(_e, x) => set('imageUrl', x)}
                  />,
                  { required: true },
                )}
              {form.bootSource === 'pvc' &&
                field(
                  'claimName',
                  'Claim name',
                  <TextInput id="vm-claimName" value={form.claimName} validated={v('claimName')} onChange={(_e, x) => set('claimName', x)} />,
                  { required: true },
                )}
              {needsSize &&
                field(
                  'diskSize',
                  'Disk size',
                  <TextInput id="vm-diskSize" value={form.diskSize} validated={v('diskSize')} onChange={(_e, x) => set('diskSize', x)} />,
                  { required: true },
                )}
              {field(
                'sshKey',
                'SSH public key',
                <TextArea
                  id="vm-sshKey"
                  value={form.sshKey}
                  placeholder="ssh-ed25519 AAAA… user@host"
                  resizeOrientation="vertical"
                  onChange={(_e, x) => set('sshKey', x)}
                />,
                { help: 'One key per line; added through cloud-init.' },
              )}
              {field(
                'cloudInitUser',
                'Cloud-init user',
                <TextInput id="vm-cloudInitUser" value={form.cloudInitUser} onChange={(_e, x) => set('cloudInitUser', x)} />,
                { help: 'Leave this and the key empty for no cloud-init disk.' },
              )}
              {field(
                'network',
                'Network',
                <FormSelect id="vm-network" value={form.network} onChange={(_e, x) => set('network', x as VmForm['network'])}>
                  {NETWORKS.map((n) => (
                    <FormSelectOption key={n.value} value={n.value} label={n.label} />
                  ))}
                </FormSelect>,
              )}
              <Checkbox
                id="vm-start"
                label="Start after creation"
                isChecked={form.start}
                onChange={(_e, x) => set('start', x)}
              />
              {error ? <ErrorAlert error={error} title="The VirtualMachine was not created" /> : null}
              <ActionGroup>
                <GatedButton
                  type="submit"
                  variant="primary"
                  attrs={form.namespace.trim() ? can.createVm(form.namespace.trim()) : null}
                  busy={busy}
                >
                  Create
                </GatedButton>
                <Button variant="link" onClick={() => navigate(href.vms())}>
                  Cancel
                </Button>
              </ActionGroup>
            </Form>
          </GridItem>
          <GridItem md={6}>
            <Title headingLevel="h2" size="md" id="yaml-preview-title">
              YAML preview
            </Title>
            <CodeBlock className="vp-yaml-preview" aria-labelledby="yaml-preview-title">
              <CodeBlockCode>{yaml}</CodeBlockCode>
            </CodeBlock>
          </GridItem>
        </Grid>
      </PageSection>
    </>
  );
}
