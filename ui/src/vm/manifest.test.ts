import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { buildVm, cloudConfig, defaultForm, toYaml, validateForm, type VmForm } from './manifest';

const base = (over: Partial<VmForm>): VmForm => ({ ...defaultForm('demo'), name: 'web1', ...over });

describe('buildVm', () => {
  it('makes a container-disk VM on the pod network', () => {
    const vm = buildVm(base({ containerDiskImage: 'quay.io/kubevirt/cirros-container-disk-demo' }));
    expect(vm).toEqual({
      apiVersion: 'kubevirt.io/v1',
      kind: 'VirtualMachine',
      metadata: { name: 'web1', namespace: 'demo' },
      spec: {
        runStrategy: 'Always',
        template: {
          metadata: { labels: { 'kubevirt.io/vm': 'web1' } },
          spec: {
            domain: {
              cpu: { cores: 1 },
              memory: { guest: '256Mi' },
              devices: {
                disks: [{ name: 'rootdisk', disk: { bus: 'virtio' } }],
                interfaces: [{ name: 'default', masquerade: {} }],
              },
            },
            networks: [{ name: 'default', pod: {} }],
            terminationGracePeriodSeconds: 30,
            volumes: [{ name: 'rootdisk', containerDisk: { image: 'quay.io/kubevirt/cirros-container-disk-demo' } }],
          },
        },
      },
    });
  });

  it('imports from a URL through a DataVolume template', () => {
    const vm = buildVm(base({ bootSource: 'url', imageUrl: 'https://example.com/d.img', diskSize: '2Gi' }));
    expect(vm.spec.dataVolumeTemplates).toEqual([
      {
        metadata: { name: 'web1-rootdisk' },
        spec: { source: { http: { url: 'https://example.com/d.img' } }, storage: { resources: { requests: { storage: '2Gi' } } } },
      },
    ]);
    expect(vm.spec.template.spec.volumes).toEqual([{ name: 'rootdisk', dataVolume: { name: 'web1-rootdisk' } }]);
  });

  it('boots from an existing PVC', () => {
    const vm = buildVm(base({ bootSource: 'pvc', claimName: 'golden' }));
    expect(vm.spec.dataVolumeTemplates).toBeUndefined();
    expect(vm.spec.template.spec.volumes).toEqual([{ name: 'rootdisk', persistentVolumeClaim: { claimName: 'golden' } }]);
  });

  it('makes a blank disk from a blank DataVolume', () => {
    const vm = buildVm(base({ bootSource: 'blank', diskSize: '1Gi' }));
    expect(vm.spec.dataVolumeTemplates?.[0].spec.source).toEqual({ blank: {} });
    expect(vm.spec.template.spec.volumes?.[0]).toEqual({ name: 'rootdisk', dataVolume: { name: 'web1-rootdisk' } });
  });

  it('with no network: no interfaces, no networks, autoattachPodInterface false', () => {
    const vm = buildVm(base({ containerDiskImage: 'img', network: 'none' }));
    expect(vm.spec.template.spec.domain.devices).toEqual({
      disks: [{ name: 'rootdisk', disk: { bus: 'virtio' } }],
      autoattachPodInterface: false,
    });
    expect(vm.spec.template.spec.networks).toBeUndefined();
  });

  it('Halted when not started after creation; cores and memory as typed', () => {
    const vm = buildVm(base({ containerDiskImage: 'img', start: false, cpuCores: 4, memory: '2Gi' }));
    expect(vm.spec.runStrategy).toBe('Halted');
    expect(vm.spec.template.spec.domain.cpu).toEqual({ cores: 4 });
    expect(vm.spec.template.spec.domain.memory).toEqual({ guest: '2Gi' });
  });

  it('adds a cloud-init disk only when there is a key or a user', () => {
    expect(buildVm(base({ containerDiskImage: 'img' })).spec.template.spec.volumes).toHaveLength(1);
    const vm = buildVm(base({ containerDiskImage: 'img', sshKey: 'ssh-ed25519 AAAA me@host\n\nssh-rsa BBBB you', cloudInitUser: 'fedora' }));
    const spec = vm.spec.template.spec;
    expect(spec.domain.devices.disks?.[1]).toEqual({ name: 'cloudinitdisk', disk: { bus: 'virtio' } });
    const userData = spec.volumes?.[1].cloudInitNoCloud?.userData ?? '';
    expect(userData.startsWith('#cloud-config\n')).toBe(true);
    expect(parse(userData)).toEqual({ user: 'fedora', ssh_authorized_keys: ['ssh-ed25519 AAAA me@host', 'ssh-rsa BBBB you'] });
  });

  it('round-trips through the YAML preview', () => {
    const vm = buildVm(base({ containerDiskImage: 'img' }));
    expect(parse(toYaml(vm))).toEqual(vm);
  });
});

describe('cloudConfig', () => {
  it('is null when empty', () => {
    expect(cloudConfig({ sshKey: '  \n', cloudInitUser: ' ' })).toBeNull();
  });
  it('has just the key when no user', () => {
    expect(parse(cloudConfig({ sshKey: 'ssh-ed25519 K', cloudInitUser: '' }) ?? '')).toEqual({ ssh_authorized_keys: ['ssh-ed25519 K'] });
  });
});

describe('validateForm', () => {
  it('accepts a complete form', () => {
    expect(validateForm(base({ containerDiskImage: 'img' }))).toEqual({});
  });
  it('names each problem', () => {
    const e = validateForm(base({ name: 'Web_1', memory: 'lots', cpuCores: 0, bootSource: 'url', imageUrl: 'ftp://x', diskSize: '' }));
    expect(Object.keys(e).sort()).toEqual(['cpuCores', 'diskSize', 'imageUrl', 'memory', 'name']);
  });
  it('needs the source field of the chosen boot source', () => {
    expect(validateForm(base({ bootSource: 'pvc' }))).toHaveProperty('claimName');
    expect(validateForm(base({ bootSource: 'containerDisk' }))).toHaveProperty('containerDiskImage');
    expect(validateForm(base({ bootSource: 'blank' }))).toEqual({});
  });
});
