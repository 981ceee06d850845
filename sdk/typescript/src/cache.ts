// The finished-result cache that answers repeated deliveries (docs/protocol.md §4).

interface Entry {
  body: string;
  expires: number;
}

/**
 * ResultCache keeps finished Result bodies by delivery key, bounded by entries, total
 * bytes and age, evicting the least recently stored first (a Map keeps insertion
 * order: the oldest is first).
 */
export class ResultCache {
  readonly #entries = new Map<string, Entry>();
  #bytes = 0;

  constructor(
    private readonly maxEntries: number,
    private readonly maxBytes: number,
    private readonly ttlMs: number,
  ) {}

  /** Returns the body stored for id, if present and not expired. */
  get(id: string, now: number): string | undefined {
    const e = this.#entries.get(id);
    if (!e) return undefined;
    if (now >= e.expires) {
      this.#remove(id, e);
      return undefined;
    }
    return e.body;
  }

  /** Stores body under id and evicts what no longer fits. */
  put(id: string, body: string, now: number): void {
    const old = this.#entries.get(id);
    if (old) this.#remove(id, old);
    const size = Buffer.byteLength(body);
    if (size > this.maxBytes) return;
    this.#entries.set(id, { body, expires: now + this.ttlMs });
    this.#bytes += size;
    for (const [oldest, e] of this.#entries) {
      if (this.#entries.size <= this.maxEntries && this.#bytes <= this.maxBytes && now < e.expires) break;
      this.#remove(oldest, e);
    }
  }

  #remove(id: string, e: Entry): void {
    this.#entries.delete(id);
    this.#bytes -= Buffer.byteLength(e.body);
  }
}
