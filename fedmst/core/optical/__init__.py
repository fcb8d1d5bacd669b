"""The optical layer: one home for what the fibres and all-optical nodes mean to a plan.

:mod:`~fedmst.core.optical.wavelengths` holds the wavelength accounting (first fit, continuity,
blocking) of circuits and of time-sliced wavelengths, whose frames :mod:`~fedmst.core.optical.slots`
describes; :mod:`~fedmst.core.optical.fabric` makes plans transparent to all-optical nodes (light
passes through them; nothing is relayed, aggregated or computed there);
:mod:`~fedmst.core.optical.circuits` says which links are fibres and the network their transfers are
predicted on; :mod:`~fedmst.core.optical.policies` who gets which wavelength (``--optical``).

The package imports none of them, so that the command line can read :mod:`~fedmst.core.optical.slots`
without loading the graph library.
"""
