"""The swap's part at the front door: point the deployment's site at an engine with a graceful reload
and check through the public port that it answers. Standard library only."""

from __future__ import annotations

import urllib.error
from pathlib import Path

from host.contract import FRONT_DOOR_UNIT, NGINX, Placement
from host.front_door import first_key, front_door_site
from host.swap_files import file_text, restore_file, write_file
from host.systemd import now
from host.transaction_base import TransactionBase


class FrontDoorSwitch(TransactionBase):
    # The front door's workers just before its last reload by this transaction (blue/green's drain waits
    # for them to exit).
    workers_before_reload: frozenset[int] = frozenset()

    def close_front_door(self) -> str | None:
        """Answer 503 (Retry-After) on the deployment's port instead of passing requests on, with a graceful
        reload: requests already passed on finish, new ones reach no engine. None once the public port
        answers 503: the reload only signals nginx, and until its new workers answer, the old ones still
        pass requests on, which would meet the stopping engine (502) if it stopped now."""
        write_file(self.site_path, front_door_site(self.plan, None), 0o644)
        return self.reload_front_door() or self.verify_front_door(None, closed=True, timeout=5.0)

    def switch_front_door(self, placement: Placement | None, unit: str | None = None) -> str | None:
        """Point the deployment's site at `placement` (None: remove it), the engine of `unit` (default: the
        plan's), with a graceful reload and check through the public port that it answers. None when
        done; else what failed, the site put back as it was."""
        plan = self.plan
        before = file_text(self.site_path)
        wanted = front_door_site(plan, placement, unit) if placement is not None else None
        if wanted == before and (wanted is None or self.host.running(FRONT_DOOR_UNIT)):
            return self.verify_front_door(placement, unit=unit)
        self.site_path.parent.mkdir(parents=True, exist_ok=True)
        if wanted is None:
            self.site_path.unlink(missing_ok=True)
        else:
            write_file(self.site_path, wanted, 0o644)
        problem = self.reload_front_door()
        if problem is None:
            problem = self.verify_front_door(placement, unit=unit)
        if problem is not None:
            restore_file(self.site_path, before)
            self.reload_front_door()
        return problem

    def reload_front_door(self) -> str | None:
        status, output = self.host.attempt(NGINX, "-t", "-q", "-c", str(self.front_door_dir / "nginx.conf"))
        if status != 0:
            return f"nginx -t refused the configuration: {output[-400:]}"
        action = "reload" if self.host.running(FRONT_DOOR_UNIT) else "start"
        # What the drain counts as retired, whatever a worker's title says yet (host/systemd.py says why).
        self.workers_before_reload = self.host.front_door_workers(FRONT_DOOR_UNIT)
        status, output = self.host.attempt("systemctl", action, FRONT_DOOR_UNIT)
        if status != 0:
            return f"systemctl {action} {FRONT_DOOR_UNIT} failed: {output[-400:]}"
        return None

    def verify_front_door(
        self, placement: Placement | None, *, closed: bool = False, timeout: float = 15.0, unit: str | None = None
    ) -> str | None:
        """Within `timeout`, the public port answers /v1/models from the new engine (its header names `unit`,
        default the plan's), or with `closed` the closed site's 503. A removed site (no placement) is not
        checked."""
        if placement is None and not closed:
            return None
        host = self.plan.readiness_address
        cafile, headers = self.front_door_credentials()
        scheme = "https" if cafile is not None else "http"
        url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{self.plan.port}/v1/models"
        unit = unit or self.plan.unit_name
        wanted = "answer 503" if closed else f"answer from {unit}"
        deadline = now() + timeout
        seen = "no answer"
        while True:
            try:
                backend = self.host.backend_behind(url, headers, cafile)
                if backend == unit and not closed:
                    return None
                seen = f"answered by {backend or 'no engine of ours'}"
            except urllib.error.HTTPError as error:
                if error.code == 503 and closed:
                    return None
                seen = f"HTTP {error.code}"
            except (urllib.error.URLError, OSError) as error:
                seen = str(getattr(error, "reason", error))
            if now() >= deadline:
                return f"{url} did not {wanted} within {timeout:g} s ({seen})"
            # A GET through nginx on loopback costs ~2 ms; nginx's new workers answer within ~0.1-0.2 s of
            # the reload, and the swap (or the outage, when closing) waits on this: look every 20 ms.
            self.sleep(0.02)

    def front_door_credentials(self) -> tuple[str | None, dict[str, str]]:
        """The certificate to trust (None: plain HTTP) and the headers (an API key) of the check through
        the front door, read from the deployment's access files: no key on a command line or in a unit."""
        plan = self.plan
        if not plan.access_dir:
            return None, {}
        certificate = Path(plan.access_dir) / "tls.crt"
        keys = file_text(Path(plan.keys_file)) if plan.keys_file else None
        key = first_key(keys) if keys is not None else None
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return (str(certificate) if certificate.is_file() else None), headers
