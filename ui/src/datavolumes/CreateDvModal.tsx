// Create a DataVolume: import from a URL or registry, a blank disk, or upload a file.
import {
  Button,
  Form,
  FormGroup,
  FormHelperText,
  FormSelect,
  FormSelectOption,
  HelperText,
  HelperTextItem,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  Progress,
  TextInput,
} from '@patternfly/react-core';
import { cloneElement, useEffect, useRef, useState, type ReactElement } from 'react';
import { api } from '../api/client';
import { paths } from '../api/paths';
import { formatBytes } from '../api/quantity';
import { can } from '../api/ssar';
import { ErrorAlert } from '../components/ErrorAlert';
import { GatedButton } from '../components/GatedButton';
import { useNotify } from '../state/notify';
import { buildDataVolume, DV_SOURCES, validateDvForm, type DvForm, type DvSource } from './manifest';
import { uploadToDataVolume, type UploadStage } from './upload';

const STAGE_TEXT: Record<UploadStage, string> = {
  waiting: 'Waiting for the DataVolume to be ready for the upload…',
  token: 'Asking for an upload token…',
  uploading: 'Uploading…',
  done: 'Uploaded.',
};

export function CreateDvModal({ namespace, onClose }: { namespace: string; onClose: () => void }) {
  const notify = useNotify();
  const [form, setForm] = useState<DvForm>({ name: '', namespace, source: 'http', url: '', size: '5Gi' });
  const [file, setFile] = useState<File | null>(null);
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [stage, setStage] = useState<UploadStage | null>(null);
  const [progress, setProgress] = useState(0);
  const abort = useRef(new AbortController());
  useEffect(() => () => abort.current.abort(), []);

  const errors = validateDvForm(form, file);
  const set = <K extends keyof DvForm>(k: K, v: DvForm[K]) => setForm((f) => ({ ...f, [k]: v }));

  const submit = async () => {
    setTouched(true);
    if (Object.keys(errors).length || busy) return;
    setBusy(true);
    setError(null);
    const dv = buildDataVolume(form);
    try {
      await api.post(paths.dvs(dv.metadata.namespace), dv);
      if (form.source === 'upload' && file) {
        await uploadToDataVolume(dv.metadata.namespace ?? '', dv.metadata.name ?? '', file, setStage, setProgress, abort.current.signal);
      }
      notify('success', `DataVolume ${dv.metadata.name} created`);
      onClose();
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  };

  const group = (key: keyof DvForm | 'file', label: string, input: ReactElement, required = true) => {
    const err = touched ? errors[key] : undefined;
    return (
      <FormGroup label={label} fieldId={`dv-${key}`}>
        {required ? cloneElement(input, { 'aria-required': true }) : input}
        {err ? (
          <FormHelperText>
            <HelperText>
              <HelperTextItem variant="error">{err}</HelperTextItem>
            </HelperText>
          </FormHelperText>
        ) : null}
      </FormGroup>
    );
  };
  const v = (k: keyof DvForm) => (touched && errors[k] ? 'error' : 'default');

  return (
    <Modal isOpen variant="medium" onClose={onClose} aria-labelledby="create-dv-title">
      <ModalHeader title="Create DataVolume" labelId="create-dv-title" />
      <ModalBody>
        <Form
          id="create-dv-form"
          onSubmit={(e) => {
            e.preventDefault();
            void submit();
          }}
        >
          {group('name', 'Name', <TextInput id="dv-name" value={form.name} validated={v('name')} onChange={(_e, x) => set('name', x)} />)}
          {group(
            'namespace',
            'Namespace',
            <TextInput id="dv-namespace" value={form.namespace} validated={v('namespace')} onChange={(_e, x) => set('namespace', x)} />,
          )}
          {group(
            'source',
            'Source',
            <FormSelect id="dv-source" value={form.source} onChange={(_e, x) => set('source', x as DvSource)}>
              {DV_SOURCES.map((s) => (
                <FormSelectOption key={s.value} value={s.value} label={s.label} />
              ))}
            </FormSelect>,
          )}
          {form.source === 'http' &&
            group(
              'url',
              'Image URL',
              <TextInput id="dv-url" type="url" value={form.url} validated={v('url')} placeholder="https://example.com/disk.qcow2" onChange={(_e, x) => set('url', x)} />,
            )}
          {form.source === 'registry' &&
            group(
              'url',
              'Registry image',
              <TextInput id="dv-url" value={form.url} validated={v('url')} placeholder="docker://quay.io/containerdisks/fedora:latest" onChange={(_e, x) => set('url', x)} />,
            )}
          {group('size', 'Size', <TextInput id="dv-size" value={form.size} validated={v('size')} onChange={(_e, x) => set('size', x)} />)}
          {form.source === 'upload' &&
            group(
              'file',
              'Image file',
              <input
                id="dv-file"
                type="file"
                className="pf-v6-c-form-control"
                onChange={(e) => setFile(e.target.files?.[0] ?? null)}
              />,
            )}
          {file && form.source === 'upload' ? <small>{`${file.name}, ${formatBytes(file.size)}`}</small> : null}
        </Form>
        {stage ? (
          <div style={{ marginTop: 16 }}>
            <p>{STAGE_TEXT[stage]}</p>
            {stage === 'uploading' || stage === 'done' ? (
              <Progress value={Math.round(progress * 1000) / 10} title="Upload" aria-label="Upload progress" />
            ) : null}
          </div>
        ) : null}
        <ErrorAlert error={error} title="The DataVolume was not created" />
      </ModalBody>
      <ModalFooter>
        <GatedButton
          type="submit"
          form="create-dv-form"
          variant="primary"
          attrs={form.namespace.trim() ? can.createDv(form.namespace.trim()) : null}
          busy={busy}
        >
          Create
        </GatedButton>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}
