// The serving-overhead bench server: a no-op provider for kind "bench" version 1
// (work returns status {}), served by the SDK over plain HTTP on BENCH_ADDR
// (host:port) with the secret BENCH_SECRET (whsec_...). The benchmark driver starts
// it, waits for the "listening" line on stdout, posts signed single and batched
// deliveries, and stops it with SIGTERM. Needs `npm run build` first.
import { provider, serve } from "@convergeplane/provider-sdk";

const addr = process.env.BENCH_ADDR;
const secret = process.env.BENCH_SECRET;
if (!addr || !secret) {
  process.stderr.write("bench server: BENCH_ADDR (host:port) and BENCH_SECRET (whsec_...) are required\n");
  process.exit(2);
}
const srv = await serve([provider("bench", 1, () => ({ status: {} }))], {
  addr,
  secrets: [secret],
  logger: { debug() {}, info() {}, warn: console.error, error: console.error },
});
process.stdout.write(`listening on ${srv.url}\n`);
await srv.done;
