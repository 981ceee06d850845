// Verifies a Standard Webhooks request with the official `standardwebhooks` package.
// stdin: {"secret": "whsec_…", "headers": {"webhook-id": …, "webhook-timestamp": …,
// "webhook-signature": …}, "body": "<raw body as a string>"}
// Exit 0 if it verifies, 1 (with the reason on stderr) if not.
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const input = JSON.parse(readFileSync(0, "utf8"));
try {
  new Webhook(input.secret).verify(input.body, input.headers, { jsonParse: false });
  process.exit(0);
} catch (err) {
  console.error(String(err && err.message ? err.message : err));
  process.exit(1);
}
