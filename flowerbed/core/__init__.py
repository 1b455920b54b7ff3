"""The ground floor: seeds, the device, progress in words, clipping, stage timers and result files.

Every other part of flowerbed may use it; it uses none of them (only ``flowerbed.settings``).
"""
