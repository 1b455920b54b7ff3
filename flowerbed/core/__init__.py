"""The ground floor: seeds, the device, progress in words, clipping, stage timers, result files
and the processes of a local Flower run.

Every other part of flowerbed may use it; it uses none of them (only ``flowerbed.settings``).
"""
