"""Home Assistant's REST API as a Group names it: the base URL and the long-lived access token.

The base of the two things a Group reads through Home Assistant: a UPS's entities
(`battery.HomeAssistantSource`) and a price sensor (`group.HomeAssistantPrices`). The operator's
leader reads both with `execution.homeassistant` (`GET <url>/api/states/<entity>` with
`Authorization: Bearer <token>`), the token read by name from a Secret of the Group's namespace.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from lightsout.models.base import ApiModel
from lightsout.models.drivers import TokenSecretRef
from lightsout.models.types import HttpUrl


class HomeAssistantApi(ApiModel):
    """Where Home Assistant answers, and the token it takes."""

    url: HttpUrl
    """Base URL of Home Assistant, e.g. http://homeassistant.local:8123."""
    token_secret_ref: TokenSecretRef
    """Secret key, in the Group's namespace, holding a long-lived access token (a Home
    Assistant user's profile, Security tab). The operator reads it through the API, so the
    chart must name the Secret in `upsTokenSecrets`."""

    @property
    def address(self) -> str:
        """Home Assistant's `host:port`, as sources and messages name it."""
        url = urlsplit(self.url)
        netloc = url.netloc.rpartition("@")[2]  # never a user:password@ written into the URL
        try:
            port = url.port
        except ValueError:  # out of range: the connection says so
            return netloc
        return netloc if port else f"{netloc}:{443 if url.scheme == 'https' else 80}"
