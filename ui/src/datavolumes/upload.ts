// CDI's upload flow: wait for the DataVolume to be ready for an upload, get a token,
// then send the file with progress.
import { api, getCsrfToken } from '../api/client';
import { paths } from '../api/paths';
import type { DataVolume } from '../api/types';

export type UploadStage = 'waiting' | 'token' | 'uploading' | 'done';

interface UploadTokenRequest {
  status?: { token?: string };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls the DataVolume until its phase is UploadReady (or it fails). */
export async function waitForUploadReady(ns: string, name: string, signal: AbortSignal, timeoutMs = 10 * 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!signal.aborted) {
    const dv = await api.get<DataVolume>(paths.dv(ns, name), signal);
    const phase = dv.status?.phase;
    if (phase === 'UploadReady') return;
    if (phase === 'Failed') throw new Error('The DataVolume failed before it was ready for the upload.');
    if (Date.now() > deadline) throw new Error('The DataVolume did not become ready for an upload in time.');
    await sleep(2000);
  }
  throw new Error('Cancelled');
}

export async function uploadToken(ns: string, pvcName: string): Promise<string> {
  const res = await api.post<UploadTokenRequest>(paths.uploadTokenRequests(ns), {
    apiVersion: 'upload.cdi.kubevirt.io/v1beta1',
    kind: 'UploadTokenRequest',
    spec: { pvcName },
  });
  const token = res?.status?.token;
  if (!token) throw new Error('The server returned no upload token.');
  return token;
}

/** Sends the file; XMLHttpRequest because fetch cannot report upload progress. */
export function sendFile(token: string, file: Blob, onProgress: (fraction: number) => void, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', paths.upload());
    xhr.setRequestHeader('Authorization', `Bearer ${token}`);
    xhr.setRequestHeader('X-CSRF-Token', getCsrfToken());
    xhr.setRequestHeader('Content-Type', 'application/octet-stream');
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable && e.total > 0) onProgress(e.loaded / e.total);
    };
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve();
      else reject(new Error(`The upload was refused: ${xhr.status} ${xhr.responseText.slice(0, 300)}`));
    };
    xhr.onerror = () => reject(new Error('The upload failed (network error).'));
    xhr.onabort = () => reject(new Error('The upload was cancelled.'));
    signal.addEventListener('abort', () => xhr.abort());
    xhr.send(file);
  });
}

export async function uploadToDataVolume(
  ns: string,
  name: string,
  file: Blob,
  onStage: (s: UploadStage) => void,
  onProgress: (fraction: number) => void,
  signal: AbortSignal,
): Promise<void> {
  onStage('waiting');
  await waitForUploadReady(ns, name, signal);
  onStage('token');
  const token = await uploadToken(ns, name);
  onStage('uploading');
  await sendFile(token, file, onProgress, signal);
  onStage('done');
}
