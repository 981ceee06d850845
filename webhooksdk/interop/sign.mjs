// Signs a payload with the official `standardwebhooks` package.
// stdin: {"secret": "whsec_…", "msg_id": "msg_…", "timestamp": <unix seconds>,
// "body": "<raw body as a string>"}
// stdout: {"webhook-id": …, "webhook-timestamp": …, "webhook-signature": "v1,…"}
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const input = JSON.parse(readFileSync(0, "utf8"));
const signature = new Webhook(input.secret).sign(
  input.msg_id,
  new Date(input.timestamp * 1000),
  input.body,
);
process.stdout.write(
  JSON.stringify({
    "webhook-id": input.msg_id,
    "webhook-timestamp": String(input.timestamp),
    "webhook-signature": signature,
  }),
);
