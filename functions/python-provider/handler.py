"""The python-provider Lambda function: examples/python-provider's kinds (bucket/v1, cdn/v1,
vpc/v1) served from Lambda events by converge_provider.lambda_handler.

Handler ``handler.handler`` on the python3.12 runtime. PROVIDER_SECRETS holds the
endpoint's signing secret(s), whsec_..., comma-separated; PROVIDER_LOG_LEVEL the log level (INFO).
"""

from __future__ import annotations

import logging
import os

from converge_provider import Options
from converge_provider.lambda_handler import from_env
from provider import bucket, cdn, vpc

logging.basicConfig(level=os.environ.get("PROVIDER_LOG_LEVEL", "INFO"))
handler = from_env([bucket, cdn, vpc], Options())
