// The node-provider Lambda function: examples/node-provider's kinds (account/v1,
// vpc/v1) served from Lambda events by the TypeScript SDK's Lambda adapter
// (@convergeplane/provider-sdk/lambda).
//
// Handler index.handler on the nodejs20.x runtime. PROVIDER_SECRETS holds the
// endpoint's signing secret(s), whsec_..., comma-separated; PROVIDER_LOG_LEVEL=debug
// also logs each batch served. Logs are JSON lines on stderr.
import { createHandler } from "@convergeplane/provider-sdk/lambda";
import { account } from "./account.mjs";
import { vpc } from "./vpc.mjs";

const debug = process.env.PROVIDER_LOG_LEVEL?.toLowerCase() === "debug";
const line = (level) => (msg, attrs = {}) => process.stderr.write(JSON.stringify({ level, msg, ...attrs }) + "\n");
const logger = { debug: debug ? line("debug") : () => {}, info: line("info"), warn: line("warn"), error: line("error") };

export const handler = createHandler([account, vpc], { logger });
