"""The optical layer: one home for what the fibres and all-optical nodes mean to a plan.

:mod:`~fedmst.core.optical.wavelengths` holds the wavelength accounting (first fit, continuity,
blocking); :mod:`~fedmst.core.optical.fabric` makes plans transparent to all-optical nodes (light
passes through them; nothing is relayed, aggregated or computed there);
:mod:`~fedmst.core.optical.circuits` says which links are fibres, gives the circuits by a policy
(``--optical``) and the network their transfers are predicted on.
"""

from fedmst.core.optical.wavelengths import Lightpath, Link, Owner, Spectrum, admit, lightpath_paths, link

__all__ = ["Lightpath", "Link", "Owner", "Spectrum", "admit", "lightpath_paths", "link"]
