import { describe, expect, it } from 'vitest';
import { buildDataVolume, registryUrl, validateDvForm, type DvForm } from './manifest';

const f = (over: Partial<DvForm>): DvForm => ({ name: 'disk', namespace: 'ns', source: 'http', url: '', size: '1Gi', ...over });

describe('DataVolume form', () => {
  it('imports from a URL', () => {
    expect(buildDataVolume(f({ url: 'https://x/d.img' }))).toEqual({
      apiVersion: 'cdi.kubevirt.io/v1beta1',
      kind: 'DataVolume',
      metadata: { name: 'disk', namespace: 'ns' },
      spec: { source: { http: { url: 'https://x/d.img' } }, storage: { resources: { requests: { storage: '1Gi' } } } },
    });
  });
  it('imports from a registry with docker://', () => {
    expect(buildDataVolume(f({ source: 'registry', url: 'quay.io/a/b:1' })).spec.source).toEqual({ registry: { url: 'docker://quay.io/a/b:1' } });
    expect(registryUrl('docker://x/y')).toBe('docker://x/y');
  });
  it('makes blank and upload sources', () => {
    expect(buildDataVolume(f({ source: 'blank' })).spec.source).toEqual({ blank: {} });
    expect(buildDataVolume(f({ source: 'upload' })).spec.source).toEqual({ upload: {} });
  });
  it('validates', () => {
    expect(validateDvForm(f({ url: 'https://x' }))).toEqual({});
    expect(Object.keys(validateDvForm(f({ name: 'Bad', size: 'x', url: '' })))).toEqual(['name', 'size', 'url']);
    expect(validateDvForm(f({ source: 'upload' }), null)).toHaveProperty('file');
  });
});
