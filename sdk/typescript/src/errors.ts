/**
 * A failure that retrying cannot fix: the task's Result carries `"terminal": true` and
 * the resource pins Failed until its spec changes. Throw it from `work` (or wrap an error
 * with {@link terminal}); any other error is transient and retried with backoff.
 */
export class TerminalError extends Error {
  override name = "TerminalError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** Wraps err as a {@link TerminalError} with the same message (err becomes its cause). */
export function terminal(err: unknown): TerminalError {
  if (err instanceof TerminalError) return err;
  return new TerminalError(errorMessage(err), { cause: err });
}

/** Reports whether err, or any error in its `cause` chain, is a {@link TerminalError}. */
export function isTerminal(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 32; depth++) {
    if (e instanceof TerminalError) return true;
    e = e instanceof Error ? e.cause : undefined;
  }
  return false;
}

/**
 * The abort reason of a work signal when a newer claim took the task over (a heartbeat,
 * the callback or the payload fetch was answered 409): this run's Result would be
 * discarded, so it is dropped.
 */
export class SupersededError extends Error {
  override name = "SupersededError";
  constructor() {
    super("task superseded by a newer claim");
  }
}

/** The abort reason of a work signal when the endpoint's drain timed out. */
export class ShutdownError extends Error {
  override name = "ShutdownError";
  constructor() {
    super("endpoint shut down");
  }
}

/** errorMessage is the message a thrown value is reported with. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
