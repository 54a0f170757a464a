// Kubernetes `Status` objects: the shape every API error arrives in.

export interface StatusCause {
  field?: string;
  message?: string;
  reason?: string;
}

export interface Status {
  kind?: string;
  apiVersion?: string;
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  details?: {
    name?: string;
    group?: string;
    kind?: string;
    causes?: StatusCause[];
    retryAfterSeconds?: number;
  };
}

/** An HTTP error from the API, carrying the server's Status when it sent one. */
export class ApiError extends Error {
  readonly code: number;
  readonly status?: Status;

  constructor(code: number, message: string, status?: Status) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.status = status;
  }

  get reason(): string | undefined {
    return this.status?.reason;
  }

  /** Field-level causes (validation errors), if any. */
  get causes(): StatusCause[] {
    return this.status?.details?.causes ?? [];
  }
}

export function isStatus(v: unknown): v is Status {
  return typeof v === 'object' && v !== null && (v as Status).kind === 'Status';
}

/** Builds an ApiError from a failed response, reading its Status body if it has one. */
export async function errorFromResponse(res: Response): Promise<ApiError> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // The body is gone (aborted); the status line is all we have.
  }
  let status: Status | undefined;
  try {
    const parsed: unknown = text ? JSON.parse(text) : undefined;
    if (isStatus(parsed)) status = parsed;
  } catch {
    // Not JSON: a proxy's or the server's plain-text error.
  }
  const message =
    status?.message || text.trim().slice(0, 500) || `${res.status} ${res.statusText}`.trim();
  return new ApiError(res.status, message, status);
}
